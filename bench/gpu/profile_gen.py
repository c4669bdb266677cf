"""Where a cached generation step's time goes on a GPU: attnviz in-process (ATTNVIZ_INPROCESS=1) under cProfile.

    python bench/gpu/profile_gen.py --folder DIR [--provider cuda] [--steps 256] [--top 25] [--isolated]

DIR: an export of bench/generation_plain_bench.py (holds onnx/).  Prints per-token wall of the in-process loop, then
the functions with the most own time over one generation of --steps tokens (EOS off, the model warmed first).
Every call gets a prompt of its own: the model keeps its last result, and the same feeds again are answered from it
(session 12's profile measured that answer, not a generation).  ``--isolated``: the loop in the crash-isolation
child as a user runs it; the profile then shows the parent's side (waiting, reading the reply, assembling).
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

if "--isolated" not in sys.argv:
    os.environ["ATTNVIZ_INPROCESS"] = "1"  # the loop in this process, so that the profile sees it
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--folder", type=Path, required=True)
    ap.add_argument("--provider", default="cuda", choices=["cpu", "cuda"])
    ap.add_argument("--steps", type=int, default=256)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--isolated", action="store_true", help="run the loop in the isolation child (as a user does)")
    a = ap.parse_args()
    from attnviz.runtime import open_model

    m = open_model(a.folder / "onnx", provider=a.provider, threads=1)
    m.meta["special"] = {k: v for k, v in (m.meta.get("special") or {}).items() if k != "eos"}
    prompts = (np.random.default_rng(seed).integers(3, 99, (1, 8)) for seed in range(4))
    feeds = [{"input_ids": p, "attention_mask": np.ones_like(p)} for p in prompts]
    for f in feeds[:2]:
        m.analyze(feeds=f, generate=a.steps)  # shapes learned, sessions and buffers made
    t0 = time.perf_counter()
    r = m.analyze(feeds=feeds[2], generate=a.steps)
    wall = time.perf_counter() - t0
    where = "isolated" if a.isolated else "in-process"
    print(f"{where}, {a.provider}: {wall / a.steps * 1e3:.2f} ms a token; loop_cache {r.info.get('loop_cache')}")
    prof = cProfile.Profile()
    prof.enable()
    m.analyze(feeds=feeds[3], generate=a.steps)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(a.top)


if __name__ == "__main__":
    main()
