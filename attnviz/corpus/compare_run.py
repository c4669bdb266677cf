"""``attnviz compare A B --texts FILE --out DIR``: two models' attention head by head over a corpus.

The driver reads and tokenises the corpus with both models (their tokens must agree item by item), cuts padded
batches as ``attnviz corpus`` does, and an engine (local processes or Ray, :mod:`attnviz.corpus.compare_engines`)
runs both models on each batch and reduces their maps there; the partial sums fold here in batch order and are
checkpointed, so an interrupted run resumes to the same result.  Writes ``heads.parquet`` (the single-input
form's columns, each measure over every real query row of the corpus), ``items.parquet`` (per item) and
``run.json``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnviz import AttnvizError
from attnviz.core.compare import MEASURES
from attnviz.core.words import with_article
from attnviz.core.writes import command_scope, make_folder, results_folder_on_failure
from attnviz.corpus import items as it
from attnviz.corpus import outfiles, resume_settings
from attnviz.corpus.compare_engines import ENGINES, ComparePool
from attnviz.corpus.compare_reduce import CompareAccumulator, CompareSetup, CompareTask, Matched
from attnviz.corpus.compare_words import no_shared_site, side_error
from attnviz.corpus.config import EngineConfig
from attnviz.corpus.cut import Read
from attnviz.corpus.stream import MostlyUnknown, unknown_report
from attnviz.corpus.tables import HEADS, RUN, write_heads

ITEMS = "items.parquet"
CHECKPOINT = "checkpoint.npz"
CHECKPOINT_EVERY_S = 2.0


@dataclass
class CompareCorpusConfig(EngineConfig):
    a: str
    b: str
    out: str
    texts: str
    pair_column: str | None = None
    batch_size: int = 32
    max_items: int | None = None
    max_tokens: int | None = None  # each item cut to N tokens (corpus/cut.py): A and B read the same cut items


@dataclass
class CompareCorpusResult:
    out: Path
    heads: list[dict]
    outputs: list[dict]
    unmatched: list[str]
    items: int
    batches: int
    resumed_items: int
    wall_s: float
    note: str | None = None  # said once after the run (a corpus mostly of the unknown token)


def _check(cfg: CompareCorpusConfig) -> None:
    from attnviz.corpus.prestart import check_engine

    if cfg.batch_size < 1:
        raise AttnvizError("--batch-size must be 1 or more")
    if cfg.max_items is not None and cfg.max_items < 1:
        raise AttnvizError("--max-items must be 1 or more")
    if cfg.max_tokens is not None and cfg.max_tokens < 1:
        raise AttnvizError("--max-tokens must be 1 or more")
    check_engine(cfg, ENGINES)
    for name, path in (("A", cfg.a), ("B", cfg.b)):
        if not (Path(path).is_file() or Path(path).is_dir()):
            from attnviz.runtime.folder import hub_name_hint  # (numpy: only on this way out)

            raise AttnvizError(hub_name_hint(Path(path)) or f"model {name} {path}: no such file or folder")
    out = Path(cfg.out)
    if out.exists() and not out.is_dir():
        raise AttnvizError(f"--out {out} is a file; give a folder for {HEADS}, {ITEMS} and {RUN}")
    outfiles.refuse_foreign(out, "compare")


def run_compare_corpus(cfg: CompareCorpusConfig, on_batch: Callable[[int], None] | None = None) -> CompareCorpusResult:
    """Run ``cfg``; ``on_batch(items_done)`` after each folded batch (an exception there, e.g. KeyboardInterrupt,
    stops the run with its progress checkpointed)."""
    from attnviz.core.writes import guard

    _check(cfg)
    out = Path(cfg.out)
    with command_scope():
        guard(
            {"model A": cfg.a, "model B": cfg.b, "the --texts file": cfg.texts, "the --tokenizer file": cfg.tokenizer},
            {"--out": [out / n for n in (HEADS, ITEMS, RUN, CHECKPOINT)]},
        )
        outfiles.refuse_model_folder(out, {"model A": cfg.a, "model B": cfg.b})
        pools: list[ComparePool] = []
        try:
            with results_folder_on_failure(out, CHECKPOINT):  # a failed run leaves no folder it made for nothing
                return _run(cfg, on_batch, pools)
        finally:
            for p in pools:
                p.close(kill=True)


def _gpu(provider: str, model: str | Path) -> bool:
    """Whether the workers are laid out for a GPU: ``cuda``, or ``auto`` unless it is known to land on the CPU (no
    NVIDIA GPU, or an onnxruntime build without the CUDA provider: runtime/device.py, as the corpus decides)."""
    from attnviz.runtime.device import before_session

    return before_session(model, provider, kept=False) != "cpu"


def _run(cfg: CompareCorpusConfig, on_batch, pools: list[ComparePool]) -> CompareCorpusResult:
    from attnviz.corpus.config import CorpusConfig
    from attnviz.corpus.engines import default_threads, default_workers
    from attnviz.corpus.prestart import batches_at_least
    from attnviz.runtime import open_model

    t_start = time.perf_counter()
    gpu = _gpu(cfg.provider, cfg.a)
    workers = cfg.workers or default_workers(cfg.provider, gpu, cfg.engine)
    threads = cfg.threads or default_threads(workers)
    early = CompareSetup(cfg.a, cfg.b, cfg.provider, cfg.tokenizer, threads, workers, (), (), cfg.ray_address, gpu)
    if cfg.engine == "local":  # the workers open both models while the driver opens, tokenises and plans
        probe = CorpusConfig(cfg.a, cfg.out, texts=cfg.texts, batch_size=cfg.batch_size, max_items=cfg.max_items)
        pools.append(ComparePool.start(early, min(workers, batches_at_least(probe, workers))))
    models = [open_model(p, provider=cfg.provider, tokenizer=cfg.tokenizer) for p in (cfg.a, cfg.b)]
    kind = _check_models(cfg, models)
    matched, unmatched = match_sites(models[0].sites, models[1].sites)
    if not matched:
        raise AttnvizError(no_shared_site(unmatched))
    names = {o.name for o in models[1].outputs}
    outputs = tuple(o.name for o in models[0].outputs if o.name in names)
    items = it.read_texts(cfg.texts, cfg.pair_column, cfg.max_items)
    heads = sum(s.heads or 0 for m in models for s in m.sites)  # both models' maps are held at once
    tasks, cuts, sides, unknown = plan(models, kind, items, cfg.batch_size, heads, cfg.max_tokens)
    file_sha = it.sha256_items(items) if cuts else None  # the items as the file holds them, before the cut
    items = _as_read(items, cuts)  # items.parquet shows what A and B read of each item cut
    del models  # the workers hold their own sessions
    workers = max(1, min(workers, len(tasks)))
    setup = CompareSetup(
        cfg.a, cfg.b, cfg.provider, cfg.tokenizer, threads, workers, tuple(matched), outputs, cfg.ray_address, gpu
    )
    sha_a, sha_b, data_sha = it.sha256_model(cfg.a), it.sha256_model(cfg.b), it.sha256_items(items)
    fingerprint = _fingerprint(cfg, sha_a, sha_b, data_sha, tasks, setup)
    settings = {  # what the fingerprint hashes, by name (the plan and the heads follow from these)
        "model A": sha_a,
        "model B": sha_b,
        "the data": file_sha or data_sha,  # (data_sha hashes the items cut: a change of --max-tokens is no new data)
        "--batch-size": cfg.batch_size,
        "--text-pair-column": cfg.pair_column,
        "--max-tokens": cfg.max_tokens,
    }

    out = Path(cfg.out)
    ckpt = out / CHECKPOINT
    make_folder(out)  # after the input checks: bad input leaves no empty results folder
    nh, no = setup.heads, len(outputs)
    loaded = CompareAccumulator.load(ckpt, fingerprint, nh, no)
    if loaded is None and ckpt.exists():
        why = resume_settings.difference(ckpt, settings, "models, data or batch size differ")
        raise AttnvizError(
            f"{ckpt} belongs to another run ({why}); to resume it, run with its settings; else use another --out "
            "or delete it"
        )
    acc = loaded or CompareAccumulator(nh, no)
    resumed = acc.items
    bar = _bar(cfg, len(items), resumed)
    engine = ENGINES[cfg.engine]
    t0 = last_save = time.perf_counter()
    try:
        for part in engine(setup, tasks[acc.next_batch :], pools[0] if pools else None):
            acc.fold(part)
            bar.update(len(part.items))
            if acc.next_batch == 1 or time.perf_counter() - last_save > CHECKPOINT_EVERY_S:
                acc.save(ckpt, fingerprint, settings)
                last_save = time.perf_counter()
            if on_batch is not None:
                on_batch(acc.items)
    except BaseException:
        bar.close()  # first: a save that fails below must not put its error line on the bar's line (run.py)
        if acc.next_batch > 0:
            acc.save(ckpt, fingerprint, settings)  # interrupted: every folded batch is kept for the next run
        raise
    bar.close()
    run_s = time.perf_counter() - t0
    rows = head_rows(acc, matched)
    out_rows = acc.output_rows(outputs)
    run = _run_info(cfg, sha_a, sha_b, data_sha, acc, rows, out_rows, unmatched, setup, resumed, run_s, t_start)
    if cfg.max_tokens is not None:
        run.update(_truncation(cfg, kind, cuts, sides))
    said, note = unknown_report(unknown, acc.items)  # texts the tokenizers mostly do not know
    run.update(said)
    write_heads(out, rows, MEASURES, run)
    _write_items(out / ITEMS, acc, items, outputs)
    ckpt.unlink(missing_ok=True)
    return CompareCorpusResult(
        out, rows, out_rows, unmatched, acc.items, acc.next_batch, resumed, time.perf_counter() - t_start, note
    )


def _each(models, encode) -> list:
    """``encode(model)`` of A and of B, an error naming the model it came from."""
    out = []
    for side, m in zip("AB", models):
        try:
            out.append(encode(m))
        except AttnvizError as e:
            raise side_error(side, m.path, e) from None
    return out


def _check_models(cfg: CompareCorpusConfig, models) -> str:
    """Both models' kind, which must be one text kind a corpus handles (probed: head counts are read)."""
    from attnviz.corpus.plan import check_model

    kinds = []
    for name, m in zip("AB", models):
        if not m.sites:
            raise AttnvizError(f"model {name} {m.path.name}: {m.no_attention_reason}")
        m.probe()
        kinds.append(check_model(m))
    if kinds[0] != kinds[1]:
        raise AttnvizError(
            f"A is {with_article(kinds[0])} model and B {with_article(kinds[1])} model; compare two models of one kind"
        )
    kind = kinds[0]
    if kind == "vision":
        raise AttnvizError(
            "compare over a corpus takes text (--texts FILE); compare image models one image at a time (--image P)"
        )
    if kind == "encoder-decoder" and not cfg.pair_column:
        raise AttnvizError(
            "an encoder-decoder corpus compare needs targets, teacher-forced into both decoders: give "
            "--text-pair-column C (two models' greedy generations differ, and so would their maps' rows)"
        )
    return kind


def match_sites(sa, sb) -> tuple[list[Matched], list[str]]:
    """Sites matched by (stack, kind, layer, tower) with the same head count; the rest, listed as the single-input
    form lists them."""
    by_key = {(s.stack, s.kind, s.layer, s.tower): (i, s) for i, s in enumerate(sb)}
    matched: list[Matched] = []
    unmatched: list[str] = []
    seen = set()
    offset = 0
    for i, s in enumerate(sa):
        key = (s.stack, s.kind, s.layer, s.tower)
        seen.add(key)
        other = by_key.get(key)
        if other is None:
            unmatched.append(f"{s.label}: only in A")
            continue
        j, t = other
        if not s.heads or s.heads != t.heads:
            unmatched.append(f"{s.label}: {s.heads} heads in A, {t.heads} in B")
            continue
        stack = s.stack if s.tower is None else f"{s.stack} ({s.tower})"
        matched.append(Matched(i, j, stack, s.stack, s.kind, int(s.layer), int(s.heads), offset))
        offset += int(s.heads)
    unmatched += [f"{s.label}: only in B" for s in sb if (s.stack, s.kind, s.layer, s.tower) not in seen]
    return matched, unmatched


def _differ(item: it.Item, side: str, ids_a: list[int], ids_b: list[int], toks) -> AttnvizError | None:
    """None when A's and B's tokens of one item read the same (their ids may still differ: other vocabularies)."""
    la = [toks[0].label(i) for i in ids_a]
    lb = [toks[1].label(i) for i in ids_b]
    if la == lb:
        return None
    i = next((i for i, (x, y) in enumerate(zip(la, lb)) if x != y), min(len(la), len(lb)))
    x = repr(la[i]) if i < len(la) else "the end"
    y = repr(lb[i]) if i < len(lb) else "the end"
    text = str((item.pair if side == "target" else item.text) or "")
    head = text if len(text) <= 40 else text[:40] + "…"
    where = "the target of corpus item" if side == "target" else "corpus item"
    return AttnvizError(
        f"A and B tokenise {where} {item.index} {head!r} differently: token {i} is {x} in A and {y} in B "
        f"({len(la)} and {len(lb)} tokens); compare models that share a tokenizer"
    )


def plan(
    models, kind: str, items: list[it.Item], batch_size: int, heads: int, max_tokens: int | None = None
) -> tuple[list[CompareTask], dict[int, Read], tuple[int, int] | None, MostlyUnknown | None]:
    """Both models' tokens of every item (cut to ``max_tokens`` by corpus/cut.py, each model's own tokenizer
    cutting its own tokens), checked to agree; A's padded batches (and B's, where its ids differ: the same tokens
    cut the same batches, since lengths and file order are all that cutting depends on); and what the models read
    of each item cut (A's reading: the tokens agree), with (sources cut, targets cut) for an encoder-decoder; and the
    items mostly of the unknown token (A's count: the tokens agree, so B's unknown tokens are A's)."""
    cut = _plan_pairs if kind == "encoder-decoder" else _plan_text
    specs_a, specs_b, cuts, sides, unknown = cut(models, kind, items, batch_size, heads, max_tokens)
    if specs_b is not None:
        assert [s.items for s in specs_a] == [s.items for s in specs_b]
    tasks = [CompareTask(s.batch_id, s, specs_b[n] if specs_b else None) for n, s in enumerate(specs_a)]
    return tasks, cuts, sides, unknown


def _as_read(items: list[it.Item], cuts: dict[int, Read]) -> list[it.Item]:
    return [
        dataclasses.replace(
            i, text=cuts[i.index].text, pair=i.pair if cuts[i.index].pair is None else cuts[i.index].pair
        )
        if i.index in cuts
        else i
        for i in items
    ]


def _truncation(cfg: CompareCorpusConfig, kind: str, cuts: dict[int, Read], sides: tuple[int, int] | None) -> dict:
    """run.json's account of --max-tokens (as ``attnviz corpus`` writes it)."""
    from attnviz.corpus import cut as rules

    if kind == "encoder-decoder":
        rule = rules.SOURCE_TARGET
    else:
        rule = rules.PAIR if cfg.pair_column and kind != "decoder" else rules.SINGLE
    out = {"max_tokens": cfg.max_tokens, "items_truncated": len(cuts), "truncation": rule}
    if sides is not None:
        out["sources_truncated"], out["targets_truncated"] = sides
    return out


def _plan_pairs(models, kind, items, batch_size, heads, max_tokens=None) -> tuple:
    from attnviz.corpus import pairs

    ea, eb = _each(models, lambda m: pairs.encode_pairs(m, items, max_tokens=max_tokens))
    src = [m.tokenizers[0] for m in models]
    tgt = [m.tokenizers[1] or m.tokenizers[0] for m in models]
    same = True
    for n, item in enumerate(items):
        for side, toks, xa, xb in (("source", src, ea.src, eb.src), ("target", tgt, ea.dec, eb.dec)):
            if xa[n] != xb[n]:
                same = False
                if (e := _differ(item, side, xa[n], xb[n], toks)) is not None:
                    raise e
    specs_a = pairs.plan_pairs(items, ea, batch_size, heads)
    specs_b = None if same else pairs.plan_pairs(items, eb, batch_size, heads)
    return specs_a, specs_b, ea.cuts, ea.sides_cut, MostlyUnknown.of_texts(models[0], kind, ea)


def _plan_text(models, kind, items, batch_size, heads, max_tokens=None) -> tuple:
    from attnviz.corpus.plan import encode_items, has_mask, plan_text

    ma, mb = models
    ea, eb = _each(models, lambda m: encode_items(m, items, max_tokens=max_tokens))
    decoder = kind == "decoder"
    toks = [(m.tokenizers[1] or m.tokenizers[0]) if decoder else m.tokenizers[0] for m in models]
    same = np.array_equal(ea.offsets, eb.offsets) and np.array_equal(ea.ids, eb.ids)
    if not same:
        for n, item in enumerate(items):
            xa = ea.ids[ea.offsets[n] : ea.offsets[n + 1]].tolist()
            xb = eb.ids[eb.offsets[n] : eb.offsets[n + 1]].tolist()
            if xa != xb and (e := _differ(item, "text", xa, xb, toks)) is not None:
                raise e
    # an encoder without a mask input (either model) cannot be padded: a batch holds one length
    equal = kind == "encoder" and not (has_mask(ma) and has_mask(mb))
    specs_a = plan_text(items, ea, None, None, batch_size, equal_lengths=equal, heads=heads)
    specs_b = None if same else plan_text(items, eb, None, None, batch_size, equal_lengths=equal, heads=heads)
    return specs_a, specs_b, ea.cuts, None, MostlyUnknown.of_texts(ma, kind, ea)


def _fingerprint(cfg, sha_a: str, sha_b: str, data_sha: str, tasks: list[CompareTask], setup: CompareSetup) -> str:
    """The run's identity: a checkpoint is resumed only by a run that would cut and compare the very same batches."""
    plan_h = hashlib.sha256()
    for t in tasks:
        plan_h.update(np.asarray(t.a.items, np.int64).tobytes() + b"|")
    keys = [(m.a, m.b, m.heads) for m in setup.matched]
    return hashlib.sha256(
        json.dumps(
            [
                "compare",
                sha_a,
                sha_b,
                data_sha,
                cfg.batch_size,
                cfg.pair_column,
                plan_h.hexdigest(),
                keys,
                setup.outputs,
                *([cfg.max_tokens] if cfg.max_tokens is not None else []),  # a run without it keeps its identity
            ]
        ).encode()
    ).hexdigest()


def head_rows(acc: CompareAccumulator, matched: list[Matched]) -> list[dict]:
    js, agree, diff = acc.head_measures()
    rows = []
    for m in matched:
        for h in range(m.heads):
            i = m.offset + h
            rows.append(
                {
                    "stack": m.stack,
                    "kind": m.kind,
                    "layer": m.layer,
                    "head": h,
                    "js_divergence": float(js[i]),
                    "max_abs_diff": float(diff[i]),
                    "top1_agreement": float(agree[i]),
                }
            )
    return rows


def _write_items(path: Path, acc: CompareAccumulator, items: list[it.Item], outputs: tuple[str, ...]) -> None:
    """One row per item: its measures over every compared head and real row, and its largest output change."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from attnviz.core.writes import atomic_path

    by_index = {i.index: i for i in items}
    order = np.argsort(acc.item_index, kind="stable")
    cols = acc.item_cols[order]
    no = len(outputs)
    tokens, js, rows, agree, diff = (cols[:, k] for k in range(len(acc.ITEM_COLS)))
    base = len(acc.ITEM_COLS)
    out_max = cols[:, base : base + no]
    kl_sum, kl_rows = cols[:, base + no : base + 2 * no], cols[:, base + 2 * no : base + 3 * no]
    logits = [j for j in range(no) if kl_rows[:, j].any()]
    with np.errstate(invalid="ignore", divide="ignore"):
        table = {
            "item": acc.item_index[order],
            "text": [by_index[int(i)].text for i in acc.item_index[order]],
            "pair": [by_index[int(i)].pair for i in acc.item_index[order]],
            "tokens": tokens.astype(np.int64),
            "js_divergence": js / rows,
            "max_abs_diff": diff,
            "top1_agreement": agree / rows,
            "output_max_abs_diff": np.fmax.reduce(out_max, axis=1) if no else np.full(len(order), np.nan),
            # the first logits output's KL(A ‖ B), bits, mean over the item's rows
            "output_kl_bits": kl_sum[:, logits[0]] / kl_rows[:, logits[0]] if logits else np.full(len(order), np.nan),
        }
    with atomic_path(path, "--out") as tmp:
        # NaN (nothing compared: no output, or no logits) is written as null
        pq.write_table(pa.table({k: pa.array(v, from_pandas=True) for k, v in table.items()}), tmp)


def _run_info(cfg, sha_a, sha_b, data_sha, acc, rows, out_rows, unmatched, setup, resumed, run_s, t_start) -> dict:
    from attnviz.corpus.run import _versions

    done = acc.items - resumed
    return {
        "models": {
            "A": {"path": str(Path(cfg.a).resolve()), "sha256": sha_a},
            "B": {"path": str(Path(cfg.b).resolve()), "sha256": sha_b},
        },
        "input": {
            k: v
            for k, v in (
                ("texts", str(Path(cfg.texts).resolve())),
                ("text_pair_column", cfg.pair_column),
                ("max_items", cfg.max_items),
                ("max_tokens", cfg.max_tokens),
            )
            if v
        },
        "data_sha256": data_sha,
        "items": acc.items,
        "tokens": acc.tokens,
        "heads": len(rows),
        "outputs": out_rows,
        "unmatched": unmatched,
        "measures": {
            "js_divergence": "Jensen–Shannon divergence of the two rows, bits (log2), mean over every real query row "
            "of every item",
            "max_abs_diff": "largest |A - B| over real query rows and keys of every item",
            "top1_agreement": "share of real query rows whose most-attended key is the same in A and B",
            "outputs": "largest |A - B| of each output over real rows; kl_bits: KL(A ‖ B) of softmax(logits) over "
            "the last axis, bits, mean over real rows",
            "items.parquet": "per item: the measures over all compared heads and its real rows; its largest output "
            "change; KL of its first logits output",
        },
        "engine": cfg.engine,
        "workers": setup.workers,
        "threads_per_worker": setup.threads,
        "provider": cfg.provider,
        "batch_size": cfg.batch_size,
        "batches": acc.next_batch,
        "resumed_from_items": resumed,
        "items_this_run": done,
        "items_per_s": done / run_s if run_s > 0 else None,
        "wall_s": time.perf_counter() - t_start,
        "versions": _versions(cfg.engine),
    }


def _bar(cfg: CompareCorpusConfig, total: int, initial: int):
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="item", desc="compare", disable=not cfg.progress, dynamic_ncols=True)
