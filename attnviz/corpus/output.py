"""Write (and read back) ``heads.parquet``, ``examples.parquet`` and ``run.json``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnviz import AttnvizError
from attnviz.core import writes
from attnviz.core.attention import shown_stack
from attnviz.core.score_direction import GOLD_SCORES
from attnviz.core.stats import ROW_STATS, SAME_WITHOUT_SINK
from attnviz.core.untrusted import read_json
from attnviz.corpus.fold import FrameShape
from attnviz.corpus.items import Item

# the file names and the --out guard live without numpy (the command checks --out before it starts its workers)
from attnviz.corpus.outfiles import EXAMPLES, HEADS, RUN, guard, refuse_model_folder  # noqa: F401
from attnviz.corpus.reduce import Accumulator, HeadGroup
from attnviz.corpus.roles import role_of

GOLD_COLUMNS = GOLD_SCORES  # heads.parquet, with --gold-column (NaN off cross heads); directions in the registry


def head_rows(
    acc: Accumulator, groups: list[HeadGroup], induction: np.ndarray | None, vision_tower: bool = False
) -> list[dict]:
    """One row per head.  ``vision_tower``: a VLM's vision file alone, whose encoder heads are named as every view names
    them, "vision" (core.attention.shown_stack; ``ablate --heads`` reads that name back)."""
    means = acc.means()
    gold = _gold_scores(acc) if acc.gold is not None else None
    aligned = _alignment(acc, groups)
    rows = []
    for g in groups:
        for h in range(g.heads):
            i = g.offset + h
            m = {name: float(means[i, s]) for s, name in enumerate(ROW_STATS)}
            m["induction"] = float(induction[i]) if induction is not None else math.nan
            role, score = role_of(m, g.kind)
            scored = {}
            if gold is not None:  # after the role: AER is a measurement against gold, not a statistic of the maps
                cross = g.kind == "cross"
                scored = {c: float(v[i]) if cross else math.nan for c, v in zip(GOLD_COLUMNS, gold)}
            rows.append(
                {
                    "stack": shown_stack(g.stack, vision_tower),
                    "kind": g.kind,
                    "layer": g.layer,
                    "head": h,
                    "items": acc.items,
                    "tokens": acc.tokens,
                    **m,
                    "role": role,
                    "role_score": score,
                    **scored,
                    **aligned.get((g.kind, g.layer, h), {}),
                }
            )
    return rows


def _alignment(acc: Accumulator, groups: list[HeadGroup]) -> dict[tuple[str, int, int], dict]:
    """``--audio-dir --gold-dir``: align-audio's columns (boundaries within 20/50/100 ms, mean error) on every
    head's row, NaN (and 0 boundaries) off the cross heads."""
    if acc.audio is None:
        return {}
    from attnviz.corpus.align_audio import MEASURES
    from attnviz.corpus.audio_items import head_columns

    cross = head_columns(acc.audio, groups)
    off = {m: 0 if kind == "int64" else math.nan for m, kind in MEASURES}
    return {
        (g.kind, g.layer, h): cross[(g.layer, h)] if g.kind == "cross" else off for g in groups for h in range(g.heads)
    }


def _gold_scores(acc: Accumulator):
    from attnviz.corpus import gold

    assert acc.gold is not None
    sc = gold.scores(acc.gold)
    return sc.aer, sc.precision, sc.recall


def gold_summary(acc: Accumulator, groups: list[HeadGroup], info: dict) -> dict:
    """run.json's ``gold``: how it was read, per cross layer the head mean's scores, the mean of all cross heads,
    the best head, and the counts behind them (so a reader can sum runs or recompute)."""
    if acc.gold is None:
        return {**info, "pairs": 0}
    aer, precision, recall = _gold_scores(acc)
    nh = sum(g.heads for g in groups)
    cross = [g for g in groups if g.kind == "cross"]

    def entry(i: int) -> dict:
        return {"aer": float(aer[i]), "precision": float(precision[i]), "recall": float(recall[i])}

    heads = [(g.layer, h, g.offset + h) for g in cross for h in range(g.heads)]
    layer, head, best = min(heads, key=lambda x: (aer[x[2]], x[0], x[1]))
    return {
        **info,
        "pairs": acc.items,
        "sure_links": int(acc.gold[-1, 3]),
        "best_head": {"layer": layer, "head": head, **entry(best)},
        "layers": [{"layer": g.layer, **entry(nh + c)} for c, g in enumerate(cross)],
        "mean_of_all_heads": entry(nh + len(cross)),
        "counts": {
            "order": "a_and_sure, a_and_possible, a, sure",
            "heads": {f"{g.layer}:{h}": acc.gold[g.offset + h].tolist() for g in cross for h in range(g.heads)},
        },
    }


def example_rows(
    acc: Accumulator,
    groups: list[HeadGroup],
    items: dict[int, Item],
    vision_tower: bool = False,
    sink_sites: frozenset[int] = frozenset(),
) -> list[dict]:
    """The top examples of each head and row statistic.  ``sink_sites``: the sites (:attr:`HeadGroup.site`) whose
    softmax has an attention sink; elsewhere each row sums to 1 over its keys (padding keys are masked or never
    seen), so a statistic of :data:`~attnviz.core.stats.SAME_WITHOUT_SINK` is its twin to the rounding and its
    examples, the same items, are left out."""
    from attnviz.corpus.reduce import signs

    names = _patch_names(acc)
    rows = []
    for g in groups:
        sign = signs(g.kind)  # the accumulator ranks sign · value (reduce.Partial.top_value)
        for h in range(g.heads):
            i = g.offset + h
            for s, name in enumerate(ROW_STATS):
                if name in SAME_WITHOUT_SINK and g.site not in sink_sites:
                    continue
                for rank in range(acc.k):
                    it = int(acc.top_item[s, i, rank])
                    if it < 0 or not np.isfinite(acc.top_value[s, i, rank]):
                        continue
                    src = items[it]
                    gen = acc.generated.get(it)  # encoder-decoder without targets: what the model generated
                    row, col = int(acc.top_row[s, i, rank]), int(acc.top_col[s, i, rank])
                    patch = names.get(it)
                    rows.append(
                        {
                            "stack": shown_stack(g.stack, vision_tower),
                            "kind": g.kind,
                            "layer": g.layer,
                            "head": h,
                            "score": name,
                            "rank": rank,
                            "item": it,
                            "value": float(sign[s] * acc.top_value[s, i, rank]),
                            "row": row,
                            "col": col,
                            # the image's frames too: one (not split) names its patches "patch (r, c)", several
                            # (tiles and a global image) its last frame's "global image patch (r, c)"; and the
                            # row's frame (its key's too: each frame attends within itself) as the Head map names it
                            **(_tower_columns(patch, row, col, acc.frames[it]) if patch else {}),
                            "text": src.text,
                            "pair": src.pair,
                            "image": src.image,
                            **({"audio": src.audio} if src.audio else {}),
                            "generated": " ".join(gen) if gen is not None else None,
                            "generate": len(gen) if gen is not None else None,
                        }
                    )
            if g.kind == "cross" and acc.gold_top_item is not None and acc.gold_top_value is not None:
                rows += _worst_aligned(acc.gold_top_value[i], acc.gold_top_item[i], g, h, items)
    return rows


def _patch_names(acc: Accumulator) -> dict[int, list[str]]:
    """A VLM's vision file alone: each example image's keys named as the view names them (corpus/tower.py)."""
    if not acc.frames:
        return {}
    from attnviz.corpus.tower import patch_names

    return {it: patch_names(*shape[:3]) for it, shape in acc.frames.items()}


def _tower_columns(patch: list[str], row: int, col: int, shape: FrameShape) -> dict:
    """An example of a VLM's vision file alone: its row's and key's patches, its image's frame count and the row's
    frame by name ("tile 1 (row 0, col 1)", :func:`attnviz.corpus.tower.frame_name`)."""
    from attnviz.corpus.tower import frame_name

    frames, rows, cols, down, across = shape
    return {
        "row_patch": patch[row],
        "col_patch": patch[col],
        "frames": frames,
        "frame": frame_name(row // (rows * cols), frames, (down, across)),
    }


def _worst_aligned(values: np.ndarray, ids: np.ndarray, g: HeadGroup, h: int, items: dict[int, Item]) -> list[dict]:
    """Example rows of score "aer": the pairs this cross head aligns worst, with their own AER (no row or key
    scored them: the whole pair did; -1)."""
    out = []
    for rank, (v, it) in enumerate(zip(values, ids)):
        if it < 0 or not np.isfinite(v):
            continue
        src = items[int(it)]
        out.append(
            {
                "stack": g.stack,
                "kind": g.kind,
                "layer": g.layer,
                "head": h,
                "score": GOLD_COLUMNS[0],
                "rank": rank,
                "item": int(it),
                "value": float(v),
                "row": -1,
                "col": -1,
                "text": src.text,
                "pair": src.pair,
                "image": None,
                "generated": None,
                "generate": None,
            }
        )
    return out


def prepare_write() -> None:
    """Load what :func:`write` needs (pyarrow and its Parquet writer, ~0.1 s of CPU): a run calls this while a core
    idles on its last batch, so that the results are written without that wait once the batch is in."""
    import pyarrow.parquet  # noqa: F401

    from attnviz.corpus import columns  # noqa: F401


def write(out: Path, heads: list[dict], examples: list[dict], run: dict) -> None:
    """The three results, written together (core/writes.py's atomic_paths: each to a temp file beside it, then the
    three renames with a Ctrl-C held over them): never a new heads table beside an old run.json."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from attnviz.corpus.columns import table  # from_pylist's tables without importing pandas

    ex_schema = pa.schema(
        [
            ("stack", pa.string()),
            ("kind", pa.string()),
            ("layer", pa.int64()),
            ("head", pa.int64()),
            ("score", pa.string()),
            ("rank", pa.int64()),
            ("item", pa.int64()),
            ("value", pa.float64()),
            ("row", pa.int64()),
            ("col", pa.int64()),
            ("text", pa.string()),
            ("pair", pa.string()),
            ("image", pa.string()),
            ("generated", pa.string()),  # generated tokens (encoder-decoder without targets), else null
            ("generate", pa.int64()),  # how many: `attnviz open --generate N` shows the same decoder rows
        ]
    )
    if any("row_patch" in e for e in examples):  # a VLM's tower alone: the row's and the key's patches, named
        at = ex_schema.get_field_index("col") + 1
        ex_schema = ex_schema.insert(at, pa.field("row_patch", pa.string()))
        ex_schema = ex_schema.insert(at + 1, pa.field("col_patch", pa.string()))
        ex_schema = ex_schema.insert(at + 2, pa.field("frames", pa.int64()))
        ex_schema = ex_schema.insert(at + 3, pa.field("frame", pa.string()))
    if any("audio" in e for e in examples):  # a speech corpus: each example's recording
        ex_schema = ex_schema.insert(ex_schema.get_field_index("image") + 1, pa.field("audio", pa.string()))
    with writes.atomic_paths([(out / HEADS, "--out"), (out / EXAMPLES, "--out"), (out / RUN, "--out")]) as tmps:
        pq.write_table(table(heads), tmps[0])
        pq.write_table(table(examples, ex_schema), tmps[1])
        tmps[2].write_bytes(writes.json_bytes(run))


@dataclass
class CorpusResults:
    """What a corpus run wrote, read back (the GUI's Corpus view shows this)."""

    folder: Path
    heads: list[dict]
    examples: list[dict]
    run: dict

    @property
    def stats(self) -> tuple[str, ...]:
        gold = GOLD_COLUMNS if self.heads and GOLD_COLUMNS[0] in self.heads[0] else ()
        return (*ROW_STATS, "induction", "role_score", *gold)


# the other commands that write heads.parquet + run.json, told by keys only their run.json has (compare and ablate,
# one input or a corpus): a folder of theirs opened as corpus results says which command wrote it
OTHER_WRITERS = (("attnviz compare", ("models", "unmatched")), ("attnviz ablate", ("mode", "not_ablated")))


def _other_writer(folder: Path) -> str | None:
    from attnviz.corpus import results_check as check

    try:
        obj = read_json(check.results_file(folder, RUN), RUN, fix=check.FIX)
    except AttnvizError:
        return None
    if not isinstance(obj, dict):
        return None
    return next((cmd for cmd, keys in OTHER_WRITERS if all(k in obj for k in keys)), None)


def read(folder: str | Path) -> CorpusResults:
    """A results folder read back through :mod:`attnviz.corpus.results_check` (files inside the folder, row
    counts capped from the footers, columns and ``run.json`` keys of the right types); one line otherwise."""
    from attnviz.corpus import results_check as check

    folder = Path(folder)
    if folder.is_file():
        folder = folder.parent  # the user picked heads.parquet or run.json
    missing = [n for n in (HEADS, EXAMPLES, RUN) if not (folder / n).is_file()]
    if missing:
        writer = _other_writer(folder) if EXAMPLES in missing and RUN not in missing else None
        said = f"written by '{writer}', " if writer else ""
        raise AttnvizError(
            f"{folder}: {said}not a corpus results folder (missing {', '.join(missing)}); run 'attnviz corpus MODEL --texts FILE --out DIR' first"
            + (" (the window compares two models with File ▸ Compare with…)" if writer == "attnviz compare" else "")
        )
    files = {n: check.results_file(folder, n) for n in (HEADS, EXAMPLES, RUN)}
    obj = read_json(files[RUN], RUN, fix=check.FIX)  # its message names the file's path
    try:
        heads = check.heads(files[HEADS])
        examples = check.examples(files[EXAMPLES])
        run = check.run(obj, RUN)
    except AttnvizError as e:
        raise AttnvizError(f"{folder}: {e}") from None
    return CorpusResults(folder, heads, examples, run)
