"""Where a cached generation step's time goes on a GPU: attnviz in-process (ATTNVIZ_INPROCESS=1) under cProfile.

    python bench/gpu/profile_gen.py --folder DIR [--provider cuda] [--steps 256] [--top 25]

DIR: an export of bench/generation_plain_bench.py (holds onnx/).  Prints per-token wall of the in-process loop, then
the functions with the most own time over one generation of --steps tokens (EOS off, the model warmed first).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

import numpy as np

os.environ["ATTNVIZ_INPROCESS"] = "1"  # the loop in this process, so that the profile sees it
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--folder", type=Path, required=True)
    ap.add_argument("--provider", default="cuda", choices=["cpu", "cuda"])
    ap.add_argument("--steps", type=int, default=256)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    from attnviz.runtime import open_model

    m = open_model(a.folder / "onnx", provider=a.provider, threads=1)
    m.meta["special"] = {k: v for k, v in (m.meta.get("special") or {}).items() if k != "eos"}
    prompt = np.random.default_rng(0).integers(3, 99, (1, 8))
    feeds = {"input_ids": prompt, "attention_mask": np.ones_like(prompt)}
    for _ in range(2):
        m.analyze(feeds=feeds, generate=a.steps)  # shapes learned, sessions and buffers made
    t0 = time.perf_counter()
    r = m.analyze(feeds=feeds, generate=a.steps)
    wall = time.perf_counter() - t0
    print(f"in-process, {a.provider}: {wall / a.steps * 1e3:.2f} ms a token; loop_cache {r.info.get('loop_cache')}")
    prof = cProfile.Profile()
    prof.enable()
    m.analyze(feeds=feeds, generate=a.steps)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(a.top)


if __name__ == "__main__":
    main()
