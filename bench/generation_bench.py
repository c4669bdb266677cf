"""Generation benchmark: greedy steps through the KV cache vs the full re-run loop, every step's maps recorded.

    python bench/generation_bench.py [--rounds 3] [--threads 2] [--steps 64 256]

Models: random-init GPT-2 and Marian (default hidden 256, 4 layers, 8 heads, 512 positions) exported by optimum-onnx in
the tests' optimum venv (tests/optimum_env.py builds it on first use).  EOS is switched off so that every run
generates exactly N tokens.  "full re-run" is the loop attnviz used before: every step runs the whole sequence
for its logits, then one more full run gives the maps.  "kv-cache" feeds the cache (optimum with-past files) and
records each step's query rows.  One process, rounds interleaved; medians, ratios within the run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))  # this checkout's attnviz, not an installed one


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--size", type=int, nargs=3, default=[256, 4, 8], metavar=("HIDDEN", "LAYERS", "HEADS"))
    args = ap.parse_args()
    import optimum_env

    from attnviz.runtime import open_model

    tmp = Path(tempfile.mkdtemp(prefix="attnviz-genbench-"))
    rng = np.random.default_rng(0)
    cases = []
    for arch in ("gpt2", "marian"):
        m = open_model(
            optimum_env.export(arch, tmp / arch, tuple(args.size)) / "onnx", provider="cpu", threads=args.threads
        )
        m.meta["special"] = {k: v for k, v in (m.meta.get("special") or {}).items() if k != "eos"}  # N tokens exactly
        if arch == "gpt2":
            ids = rng.integers(3, 99, (1, 8))
            feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        else:
            ids = rng.integers(3, 99, (1, 16))
            feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "decoder_input_ids": np.array([[0]])}
        for cache in (True, False):  # sessions (the with-past decoder's too) are made before any timing
            m.analyze(feeds=feeds, generate=4, use_cache=cache)
        cases.append((arch, m, feeds))
    print("| model | generated | full re-run | kv-cache | tokens/s full | tokens/s cache | speed-up | maps equal |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for n in args.steps:
        for arch, m, feeds in cases:
            times = {True: [], False: []}
            results = {}
            for r in range(args.rounds):
                for cache in (True, False) if r % 2 == 0 else (False, True):
                    t0 = time.perf_counter()
                    results[cache] = m.analyze(feeds=feeds, generate=n, use_cache=cache)
                    times[cache].append(time.perf_counter() - t0)
            same = results[True].info["generated_ids"] == results[False].info["generated_ids"] and all(
                np.allclose(a.array(), b.array(), atol=1e-5) for a, b in zip(results[True].maps, results[False].maps)
            )
            full, kv = statistics.median(times[False]), statistics.median(times[True])
            print(
                f"| {arch} | {n} | {full:.2f} s | {kv:.2f} s | {n / full:.0f} | {n / kv:.0f} | {full / kv:.2f}× | {'yes' if same else 'NO'} |"
            )


if __name__ == "__main__":
    main()
