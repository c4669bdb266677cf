"""The shared max-pool (core.view.pooling.pool_by) in bands of rows against the same arithmetic on the map whole
(``_pool_whole``: what the overview's thumbnails and the figure ran before session 20), interleaved rounds on the
same arrays: CPU and wall medians, tracemalloc's peak, the cells asserted equal.

    OMP_NUM_THREADS=1 python bench/pool_band_ab.py --tokens 1024 2048 8192 30000 --rounds 5

Per map length (bench/long_map.py's map, one head): ``thumb``, one head to the overview's 64 cells a side
(``downsample``, as each head of the overview is pooled); ``figure``, to the figure's at most 2,048 cells a side
(``pool_to``: figures.views.MAX_CELLS); ``figure signed``, the same of ``map - 0.1`` by magnitude (an A - B map).
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

from attnviz.core.view import pooling
from attnviz.core.view.overview import THUMB

FIGURE_CELLS = 2048


def runs(shape: tuple[int, ...], cells: int) -> tuple[int, int]:
    return -(-shape[-2] // cells), -(-shape[-1] // cells)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[1024, 2048, 8192])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    variants = {"whole": pooling._pool_whole, "bands": pooling.pool_by}
    for tokens in args.tokens:
        m = make_map(tokens)[0, 0]
        cases = {"thumb": (m, THUMB, False), "figure": (m, FIGURE_CELLS, False)}
        if tokens <= 8192:  # the signed map is a second copy of the map (3.6 GB at 30,000)
            cases["figure signed"] = (m - np.float32(0.1), FIGURE_CELLS, True)
        for case, (a, cells, signed) in cases.items():
            fq, fk = runs(a.shape, cells)
            if fq == fk == 1:
                continue
            times: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
            peaks: dict[str, int] = {}
            outs = {}
            for name, fn in variants.items():  # untimed: the cells and the peak
                tracemalloc.start()
                outs[name] = fn(a, fq, fk, signed)
                peaks[name] = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
            np.testing.assert_array_equal(outs["whole"], outs["bands"])
            del outs
            for _ in range(args.rounds):
                for name, fn in variants.items():
                    w0, c0 = time.perf_counter(), time.process_time()
                    fn(a, fq, fk, signed)
                    times[name].append((time.perf_counter() - w0, time.process_time() - c0))
            parts = []
            for name in variants:
                wall = statistics.median(t[0] for t in times[name]) * 1000
                cpu = statistics.median(t[1] for t in times[name]) * 1000
                parts.append(f"{name} {wall:.1f} / {cpu:.1f} ms (wall/CPU), peak {peaks[name] / 2**20:.1f} MB")
            print(
                f"tokens {tokens} {case} ({fq} x {fk} runs): " + "; ".join(parts) + f"; load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
