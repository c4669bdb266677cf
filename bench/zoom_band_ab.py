"""A long map's whole view pooled at once (``pool_by``, as session 18's Head map did) or in bands of rows
(``zoom.pool_region``), interleaved rounds: CPU and wall time, tracemalloc's peak.  Same cells bit for bit.

    OMP_NUM_THREADS=1 python bench/zoom_band_ab.py [--tokens 30000] [--pixels 870 780] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from long_map import make_map

from attnviz.core import view as vm


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=30000)
    ap.add_argument("--pixels", type=float, nargs=2, default=[870.0, 780.0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    m = make_map(args.tokens)[0, 0]
    n = args.tokens
    r = vm.plan_region(m.shape, (0, n), (0, n), tuple(args.pixels))
    ways = {
        "whole (pool_by)": lambda: vm.pool_by(m[r.q0 : r.q1, r.k0 : r.k1], r.fq, r.fk),
        "bands (pool_region)": lambda: vm.pool_region(m, r),
    }
    got = {k: fn() for k, fn in ways.items()}
    assert np.array_equal(*got.values())
    times: dict[str, list[tuple[float, float, float]]] = {k: [] for k in ways}
    for _ in range(args.rounds):
        for k, fn in ways.items():
            tracemalloc.start()
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            times[k].append((wall * 1000, cpu * 1000, peak / 1e6))
    print(f"{n} tokens, {r.fq} x {r.fk} positions a cell, {r.cells} cells; load {os.getloadavg()[0]:.2f}")
    for k, rows in times.items():
        w, c, p = (statistics.median(x[i] for x in rows) for i in range(3))
        print(f"{k:>20}: {w:8.0f} ms wall {c:8.0f} ms CPU  peak {p:7.1f} MB   (rounds: {[round(x[1]) for x in rows]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
