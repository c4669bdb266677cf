"""``attnviz ablate --all-heads``: time per head against one plain forward (issue 27: target ≤ 1.1×).

    python bench/ablate_bench.py [--rounds 5] [--provider cpu|cuda] [--tokens 32 128] [--inprocess]
    python bench/ablate_bench.py --corpus [--rounds 3] [--items 24] [--workers 2]

``--corpus``: the corpus form (``attnviz ablate --all-heads --texts FILE``), through the local engine's process
pool.  Per model, one plan (:func:`attnviz.corpus.ablate_plan.plan_ablation`: the same batches for both) and,
interleaved over the rounds (the order alternating), two passes of the pool over the corpus: *plain* (workers whose
session is the unedited graph: one forward per batch) and *all heads* (the gated session: the base, then one forward
and the measures per head per batch).  Each worker times its own calls (wall, and CPU of its process, onnxruntime's
threads included), summed over the batches: the ratio is (all-heads seconds / heads) / plain forward seconds.  The
whole pass's wall (pool start-up included) is printed beside.  Models: all-MiniLM-L6-v2 (its output is hidden
states: the measures are max |Δ| alone) over sentences from the README, and the sequence-classification demo over
digit strings with their labels (KL, Δloss, Δaccuracy).

For each model, one gated session (:class:`attnviz.runtime.ablation.Ablation`, every gateable site gated) and one
session of the unedited graph opened the same way (``model.extra_session(model.proto, ...)``: same provider,
threads and crash isolation, so the comparison is of the graphs, not of the session paths).  Rounds interleave a
plain forward with every head's ablation; the first round warms up, medians over the rest:
  - plain: one forward of the unedited graph, the main output fetched;
  - gated: one forward of the gated graph with one head's mask at 0 (what each head costs onnxruntime);
  - per head: ``Ablation.change`` (the forward plus Δlogit / KL / argmax in numpy: what --all-heads pays per head).
Models: all-MiniLM-L6-v2 (6 × 12 heads, exported once as bench/corpus_bench.py does) at each --tokens length, and
the demo translation (encoder-decoder, 36 heads) and sequence-classification (8 heads) models.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))


def case(path: Path, provider: str, rounds: int, req) -> dict:
    from attnviz.runtime import open_model
    from attnviz.runtime.ablation import Ablation, gateable

    model = open_model(path, provider=provider)
    sites, _ = gateable(model)
    ab = Ablation(model, sites, "zero", req)
    plain = model.extra_session(model.proto, "bench-plain")
    offs = [{i: [h]} for i in sites for h in range(ab.gates[i].heads)]
    feeds = ab.feeds
    t_plain: list[float] = []
    t_gated: list[float] = []
    t_head: list[float] = []
    for r in range(rounds + 1):
        for off in offs:
            t0 = time.perf_counter()
            plain.run([ab.output], feeds)
            t1 = time.perf_counter()
            ab.run(off)
            t2 = time.perf_counter()
            ab.change(off)
            t3 = time.perf_counter()
            if r:  # the first round warms up
                t_plain.append(t1 - t0)
                t_gated.append(t2 - t1)
                t_head.append(t3 - t2)
    p, g, h = (statistics.median(x) * 1e3 for x in (t_plain, t_gated, t_head))
    base = plain.run([ab.output], feeds)[0]
    assert np.array_equal(base, ab.base), "the all-ones gate changed the output"
    return {"heads": len(offs), "plain": p, "gated": g, "head": h, "provider": ab.sess.provider}


PLAIN_REPEATS = 8  # plain forwards of each batch in the plain pass


def corpus_case(model: Path, texts: Path, rounds: int, workers: int, batch: int, **kw) -> dict:
    """Interleaved plain / all-heads passes of the local pool over one plan (see the module's doc)."""
    import resource
    from dataclasses import replace

    from attnviz.corpus.ablate_plan import AblateCorpusConfig, plan_ablation
    from attnviz.corpus.engines import local_engine

    cfg = AblateCorpusConfig(
        model=str(model), out="-", texts=str(texts), all_heads=True, workers=workers, batch_size=batch, **kw
    )
    plan = plan_ablation(cfg)
    # plain: the unedited graph (no site gated), PLAIN_REPEATS forwards per batch after its first (warm, as every
    # head's forward is: a fresh session's first run also allocates its arena)
    setups = {"heads": plan.setup, "plain": replace(plan.setup, sites=(), offs=((),) * PLAIN_REPEATS)}
    got: dict[str, list[dict]] = {"heads": [], "plain": []}
    for r in range(rounds + 1):
        for name in ("plain", "heads") if r % 2 else ("heads", "plain"):
            c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            parts = list(local_engine(setups[name], plan.specs))  # type: ignore[arg-type]
            wall = time.perf_counter() - t0
            c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            sec = {k: sum(p.seconds[k] for p in parts) for k in parts[0].seconds}  # type: ignore[attr-defined]
            sec["pass"] = wall
            sec["pass_cpu"] = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
            if r:  # the first round warms up (imports, file cache)
                got[name].append(sec)
    heads = len(plan.offs)
    med = statistics.median
    n = PLAIN_REPEATS
    per_head = med([x["ablations_wall"] / heads for x in got["heads"]])
    per_head_cpu = med([x["ablations_cpu"] / heads for x in got["heads"]])
    gated = med([x["forwards_wall"] / heads for x in got["heads"]])
    plain = med([x["forwards_wall"] / n for x in got["plain"]])
    plain_cpu = med([x["forwards_cpu"] / n for x in got["plain"]])
    return {
        "heads": heads,
        "items": plan.items,
        "batches": len(plan.specs),
        "plain": plain,
        "per_head": per_head,
        "gated": gated,
        "wall_ratio": med(
            [x["ablations_wall"] / heads / (y["forwards_wall"] / n) for x, y in zip(got["heads"], got["plain"])]
        ),
        "cpu_ratio": med(
            [x["ablations_cpu"] / heads / (y["forwards_cpu"] / n) for x, y in zip(got["heads"], got["plain"])]
        ),
        "plain_cpu": plain_cpu,
        "per_head_cpu": per_head_cpu,
        "pass_plain": med([x["pass"] for x in got["plain"]]),
        "pass_heads": med([x["pass"] for x in got["heads"]]),
        "workers": plan.setup.workers,
        "threads": plan.setup.threads,
    }


def corpus_main(a) -> None:
    from corpus_bench import corpus_file

    work = Path(a.work)
    rows = []
    try:
        from corpus_bench import minilm

        mini, tok = minilm(work)
        texts = corpus_file(work, a.items, words_range=(8, 30))
        rows.append(
            (
                f"all-MiniLM-L6-v2, {a.items} README sentences (8–30 words)",
                corpus_case(mini, texts, a.rounds, a.workers, 8, tokenizer=tok, provider=a.provider),
            )
        )
    except ImportError as e:
        print(f"(MiniLM skipped: {e})")
    import json

    from attnviz.training.tasks.sequence_classification import LABELS, generate, label_of

    digits = work / f"digits_{4 * a.items}.jsonl"
    digits.write_text(
        "".join(
            json.dumps({"text": " ".join(map(str, d)), "label": LABELS[label_of(d)]}) + "\n"
            for d in generate(4 * a.items, seed=7)
        )
    )
    rows.append(
        (
            f"sequence-classification demo, {4 * a.items} labelled digit strings",
            corpus_case(
                ROOT / "models/sequence-classification.onnx",
                digits,
                a.rounds,
                a.workers,
                32,
                label_column="label",
                provider=a.provider,
            ),
        )
    )
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} cores")
    print(
        "| model | heads | batches | workers × threads | plain forward (Σ batches) | gated forward | per head "
        "(forward + measures) | per head / plain (wall) | per head / plain (CPU) |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for name, r in rows:
        print(
            f"| {name} | {r['heads']} | {r['batches']} | {r['workers']} × {r['threads']} | {r['plain'] * 1e3:.1f} ms | "
            f"{r['gated'] * 1e3:.1f} ms | {r['per_head'] * 1e3:.1f} ms | **{r['wall_ratio']:.2f}×** | "
            f"**{r['cpu_ratio']:.2f}×** |"
        )
    for name, r in rows:
        print(
            f"{name}: whole passes, pool start-up included: plain {r['pass_plain']:.2f} s (1 + {PLAIN_REPEATS} "
            f"forwards a batch), all heads {r['pass_heads']:.2f} s (1 + {r['heads']})"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--provider", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--tokens", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--work", default="/tmp/attnviz_corpus_bench")
    ap.add_argument("--inprocess", action="store_true", help="onnxruntime in this process (no isolation child)")
    ap.add_argument("--corpus", action="store_true", help="the corpus form (--texts) through the local engine")
    ap.add_argument("--items", type=int, default=24, help="--corpus: MiniLM items (the demo gets 4×)")
    ap.add_argument("--workers", type=int, default=2, help="--corpus: pool processes")
    a = ap.parse_args()
    if a.inprocess:
        os.environ["ATTNVIZ_INPROCESS"] = "1"
    if a.corpus:
        corpus_main(a)
        return
    from attnviz.runtime.request import AnalyzeRequest

    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        from corpus_bench import minilm

        mini, _ = minilm(work)
        for t in a.tokens:
            ids = np.random.default_rng(0).integers(1000, 20000, (1, t)).astype(np.int64)
            ids[0, 0], ids[0, -1] = 101, 102
            req = AnalyzeRequest(feeds={"input_ids": ids, "attention_mask": np.ones_like(ids)})
            rows.append((f"all-MiniLM-L6-v2, {t} tokens", case(mini, a.provider, a.rounds, req)))
    except ImportError as e:  # no torch / weights package here: the demo models alone
        print(f"(MiniLM skipped: {e})")
    greek = "μακάριοι οἱ πτωχοὶ τῷ πνεύματι"
    rows.append(
        (
            "translation demo (teacher-forced)",
            case(
                ROOT / "models/translation.onnx",
                a.provider,
                a.rounds,
                AnalyzeRequest(text=greek, text_pair="Blessed are the poor in spirit"),
            ),
        )
    )
    rows.append(
        (
            "sequence-classification demo",
            case(
                ROOT / "models/sequence-classification.onnx",
                a.provider,
                a.rounds,
                AnalyzeRequest(text="7 2 9 5 1 8 6 3"),
            ),
        )
    )
    print(
        "| model | heads | provider | plain forward | gated forward | per head (forward + measures) | per head / plain |"
    )
    print("|---|---:|---|---:|---:|---:|---:|")
    for name, r in rows:
        print(
            f"| {name} | {r['heads']} | {r['provider']} | {r['plain']:.2f} ms | {r['gated']:.2f} ms | "
            f"{r['head']:.2f} ms | **{r['head'] / r['plain']:.2f}×** |"
        )


if __name__ == "__main__":
    main()
