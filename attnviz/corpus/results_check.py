"""Corpus results read back from disk, checked before anything shows them.

A results folder may come from elsewhere (a colleague's run, a download, a file edited by hand), so
:func:`~attnviz.corpus.output.read` reads it through here: the three files must lie inside the folder (a
symlink out of it is refused, nothing outside is read), each Parquet file is sized from its footer before its
rows are read, every column the Corpus view uses must be there with the right kind of values, and ``run.json``
must be an object whose keys have the types ``attnviz corpus`` writes.  Each refusal is one
:class:`~attnviz.AttnvizError` naming the file and what is wrong; what passes is normalised (numbers as floats,
missing statistics as NaN), so the view never meets a ``None`` layer, a text score or a list for ``run.json``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from attnviz import AttnvizError
from attnviz.core.score_direction import GOLD_SCORES
from attnviz.core.stats import ROW_STATS
from attnviz.core.untrusted import inside_folder, parquet_problem

# the window lists every head in one table: 10,000 rows draw in about two seconds (Llama-70B has 5,120 heads)
MAX_HEADS = 10_000
# top examples: heads × statistics × --top-k; 10,000 heads × 11 statistics (ROW_STATS, sink_share the 11th) × 10
MAX_EXAMPLES = 1_100_000
# a layer or head number past this is no model's (the largest have about 100 layers and 128 heads)
MAX_INDEX = 4096
KINDS = ("self", "cross")
# stack, kind, role and score are names attnviz writes ("encoder", "positional", "special_other")
NAME_CHARS = 64
NAMES = ("stack", "kind", "role", "score")

# column -> what it holds: "text", "index" (0..MAX_INDEX), "count" (0 or more), "signed" (any whole number),
# "number" (float; NaN allowed)
HEAD_COLUMNS = {"stack": "text", "kind": "text", "layer": "index", "head": "index", "role": "text"}
# absent: NaN (a results folder written before a statistic was added, e.g. "sink_share" before session 24, opens
# with that column empty rather than refused: the Parquet schema only ever grows)
HEAD_NUMBERS = ("role_score", *ROW_STATS, "induction", "items", "tokens", *GOLD_SCORES)
EXAMPLE_COLUMNS = {
    "stack": "text",
    "kind": "text",
    "layer": "index",
    "head": "index",
    "score": "text",
    "rank": "count",
    "item": "count",
    "value": "number",
    "row": "signed",
    "col": "signed",
}
EXAMPLE_OPTIONAL = {
    "text": "text",
    "pair": "text",
    "image": "text",
    "generated": "text",
    "generate": "index",
    "row_patch": "text",  # a VLM's vision file alone (corpus/tower.py): the row's and the key's patch, as the view names
    "col_patch": "text",
    "frames": "count",  # the same: the image's frames (its tiles and its global image; 1: not split)
    "frame": "text",  # the same: the row's frame as the Head map names it ("tile 1 (row 0, col 1)", "global image")
}
# run.json keys the window reads, with the types `attnviz corpus` writes them in
RUN_TYPES: dict[str, tuple[type, ...]] = {
    "model": (str,),
    "model_kind": (str,),
    "engine": (str,),
    "tokenizer": (str,),
    "example_ranking": (str,),
    "items": (int,),
    "tokens": (int,),
    "workers": (int,),
    "items_per_s": (int, float),
    "gold": (dict,),
    "items_mostly_unknown": (int,),  # corpus/stream.py MostlyUnknown: the Corpus view's note
    "unknown_token": (str,),
    "sink_note": (str,),  # attention sinks: what the row statistics did with their rows (core/stats.py sink_note)
}
GOLD_TYPES: dict[str, tuple[type, ...]] = {"convention": (str,), "sure_links": (int,), "best_head": (dict,)}
BEST_HEAD_TYPES: dict[str, tuple[type, ...]] = {"layer": (int,), "head": (int,), "aer": (int, float)}

FIX = "run 'attnviz corpus' again to write it"


def results_file(folder: Path, name: str) -> Path:
    """``folder/name`` if it is a file inside ``folder`` (a symlink that leaves it is refused)."""
    return inside_folder(folder / name, folder, f"corpus results file {name}")


def _kind_ok(arrow_type, kind: str) -> bool:
    import pyarrow as pa

    if pa.types.is_null(arrow_type):  # a column with no values at all: only optional ones may be so
        return kind == "text" or kind == "number"
    if kind == "text":
        return bool(pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type))
    if kind == "number":
        return bool(pa.types.is_floating(arrow_type) or pa.types.is_integer(arrow_type))
    return bool(pa.types.is_integer(arrow_type))


_WORDS = {
    "text": "text",
    "number": "numbers",
    "index": "whole numbers",
    "count": "whole numbers",
    "signed": "whole numbers",
}


def table(path: Path, required: dict[str, str], optional: dict[str, str], cap: int):
    """The Parquet file as a pyarrow Table with ``required`` and ``optional`` columns of the right kinds (an
    absent optional column is added empty), after its footer says it has at most ``cap`` rows."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from attnviz.core.untrusted import open_regular

    name = path.name
    try:
        with open_regular(path, "corpus results file") as fh, pq.ParquetFile(fh) as f:
            rows = f.metadata.num_rows
            if rows > cap:
                raise AttnvizError(
                    f"{name}: {rows:,} rows, more than the window shows ({cap:,}); "
                    "open a smaller run (fewer heads or a smaller --top-k)"
                )
            names = f.schema_arrow.names
            missing = [c for c in required if c not in names]
            if missing:
                s = "s" if len(missing) > 1 else ""
                raise AttnvizError(f"{name}: no column{s} {', '.join(repr(c) for c in missing)}; {FIX}")
            t = f.read(columns=[c for c in (*required, *optional) if c in names])
    except AttnvizError:
        raise
    except Exception as e:  # truncated, not Parquet, a corrupt page
        raise AttnvizError(f"{name}: not readable Parquet ({parquet_problem(e)}); {FIX}") from None
    for c, kind in {**required, **optional}.items():
        if c not in t.column_names:
            t = t.append_column(c, pa.nulls(t.num_rows, pa.float64() if kind == "number" else pa.string()))
            continue
        col = t.column(c)
        if not _kind_ok(col.type, kind):
            raise AttnvizError(f"{name}: column {c!r} holds {col.type}, not {_WORDS[kind]}; {FIX}")
        if c in required and kind != "number" and col.null_count:
            raise AttnvizError(f"{name}: column {c!r} has {col.null_count:,} empty value(s); {FIX}")
        if kind in ("index", "count") and t.num_rows and col.null_count < t.num_rows:
            lo, hi = (v.as_py() for v in pc.min_max(col).values())
            top = MAX_INDEX if kind == "index" else None
            if lo < 0 or (top is not None and hi > top):
                bad = lo if lo < 0 else hi
                bounds = f"0 to {top:,}" if top is not None else "0 or more"
                raise AttnvizError(f"{name}: column {c!r} holds {bad:,}, outside {bounds}; {FIX}")
    for c in NAMES:
        if c in required and t.num_rows:
            longest = pc.max(pc.utf8_length(t.column(c))).as_py() or 0
            if longest > NAME_CHARS:
                raise AttnvizError(f"{name}: column {c!r} holds a {longest:,}-character name; {FIX}")
    if "kind" in required:
        odd = [k for k in pc.unique(t.column("kind")).to_pylist() if k not in KINDS]
        if odd:
            raise AttnvizError(f"{name}: attention kind {str(odd[0])[:40]!r} is not one of {', '.join(KINDS)}; {FIX}")
    casts = {c: pa.float64() for c, k in {**required, **optional}.items() if k == "number"}
    casts |= {c: pa.int64() for c, k in {**required, **optional}.items() if k in ("index", "count", "signed")}
    casts |= {c: pa.string() for c, k in {**required, **optional}.items() if k == "text"}
    return pa.table({c: t.column(c).cast(casts[c]) for c in (*required, *optional)})


def heads(path: Path) -> list[dict]:
    rows = table(path, HEAD_COLUMNS, dict.fromkeys(HEAD_NUMBERS, "number"), MAX_HEADS).to_pylist()
    if not rows:
        raise AttnvizError(f"{path.name}: no heads (0 rows); {FIX}")
    seen = set()
    for h in rows:
        key = (h["stack"], h["kind"], h["layer"], h["head"])
        if key in seen:
            raise AttnvizError(
                f"{path.name}: {h['stack']} {h['kind']} layer {h['layer']} head {h['head']} twice; {FIX}"
            )
        seen.add(key)
        for c in HEAD_NUMBERS:
            if h[c] is None:
                h[c] = math.nan
    return rows


def examples(path: Path) -> list[dict]:
    return table(path, EXAMPLE_COLUMNS, EXAMPLE_OPTIONAL, MAX_EXAMPLES).to_pylist()


def _typed(obj: dict, types: dict[str, tuple[type, ...]], where: str) -> None:
    for key, want in types.items():
        v = obj.get(key)
        if v is not None and (not isinstance(v, want) or isinstance(v, bool)):
            names = " or ".join({"str": "text", "dict": "an object"}.get(t.__name__, "a number") for t in want)
            raise AttnvizError(f"{where}: {key!r} is {type(v).__name__} {str(v)[:40]!r}, not {names}; {FIX}")


def run(obj: Any, name: str) -> dict:
    """``run.json``'s object, with the keys the window reads checked for their types."""
    if not isinstance(obj, dict):
        raise AttnvizError(f"{name}: a JSON {type(obj).__name__}, not the object 'attnviz corpus' writes; {FIX}")
    _typed(obj, RUN_TYPES, name)
    gold = obj.get("gold") or {}
    if gold.get("pairs"):
        _typed(gold, GOLD_TYPES, f"{name} gold")
        if not all(k in gold for k in GOLD_TYPES) or not all(k in gold["best_head"] for k in BEST_HEAD_TYPES):
            raise AttnvizError(f"{name}: gold has pairs but no best head; {FIX}")
        _typed(gold["best_head"], BEST_HEAD_TYPES, f"{name} gold best_head")
    return obj
