"""``attnviz ablate --all-heads``: time per head against one plain forward (issue 27: target ≤ 1.1×).

    python bench/ablate_bench.py [--rounds 5] [--provider cpu|cuda] [--tokens 32 128] [--inprocess]

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--provider", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--tokens", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--work", default="/tmp/attnviz_corpus_bench")
    ap.add_argument("--inprocess", action="store_true", help="onnxruntime in this process (no isolation child)")
    a = ap.parse_args()
    if a.inprocess:
        os.environ["ATTNVIZ_INPROCESS"] = "1"
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
