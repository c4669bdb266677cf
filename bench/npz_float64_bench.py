"""Peak memory of opening a float64 map file (``load_npz``), old code against new, each round a fresh process.

A user's own ``.npz`` (or one from a double-precision model) may hold ``attn_NNN`` as float64: every map is held
as float32, and ``np.load`` then the conversion held the float64 array and its float32 copy at once.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python bench/npz_float64_bench.py --old /tmp/old_tree [--mb 1024] [--rounds 3]

``--old``: a tree of the code before (``git archive <commit> attnviz | tar -x -C DIR``); the file is written
once under the system temp folder and removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CHILD = """
import resource, sys, time, tracemalloc
from attnviz.core.io import load_npz
tracemalloc.start()
w, c = time.perf_counter(), time.process_time()
r = load_npz(sys.argv[1])
w, c = time.perf_counter() - w, time.process_time() - c
_, peak = tracemalloc.get_traced_memory()
a = r.maps[0].array()
import attnviz
assert attnviz.__file__.startswith(sys.argv[2]), attnviz.__file__
print(peak, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, a.nbytes, w, c, float(a[0, 0].sum()))
"""


def write_map(path: Path, mb: int) -> tuple[int, ...]:
    side = int((mb * 2**20 / 8 / 8) ** 0.5)  # 8 heads of [side, side] float64
    shape = (1, 8, side, side)
    rng = np.random.default_rng(0)
    a = rng.random(shape)  # (float64; rows need not sum to 1 for this)
    sites = json.dumps([{"layer": 0, "heads": 8, "node": "n", "method": "m", "stack": "encoder", "kind": "self"}])
    np.savez(path, attn_000=a, sites=np.array(sites))
    return shape


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--write", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.write:
        print(*write_map(Path(args.write), args.mb))
        return
    new = str(Path(__file__).resolve().parents[1])
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "f64.npz"
        # written by a child: a child's ru_maxrss starts at its parent's resident size when it forks (Linux)
        got_shape = subprocess.run(
            [sys.executable, __file__, "--write", str(path), "--mb", str(args.mb), "--old", args.old],
            capture_output=True,
            text=True,
            check=True,
        )
        shape = tuple(int(x) for x in got_shape.stdout.split())
        print(f"map {list(shape)} float64, file {path.stat().st_size / 2**20:,.0f} MiB; load {os.getloadavg()}")
        got: dict[str, list[list[float]]] = {"old": [], "new": []}
        for _ in range(args.rounds):
            for name, tree in (("old", args.old), ("new", new)):  # interleaved rounds
                env = {**os.environ, "PYTHONPATH": tree, "OMP_NUM_THREADS": "1"}
                out = subprocess.run(  # (cwd: not the worktree, whose attnviz would come first on sys.path)
                    [sys.executable, "-c", CHILD, str(path), tree], env=env, cwd=d, capture_output=True, text=True
                )
                if out.returncode:
                    sys.exit(out.stderr)
                got[name].append([float(x) for x in out.stdout.split()])
        for name, rows in got.items():
            for peak, rss, f32, w, c, check in rows:
                print(
                    f"{name}: tracemalloc peak {peak / 2**20:7,.0f} MiB ({peak / f32:.2f}x the float32 map), "
                    f"ru_maxrss {rss / 2**20:7,.0f} MiB, wall {w:.2f} s, cpu {c:.2f} s, head sum {check!r}"
                )
        print(f"load after {os.getloadavg()}")


if __name__ == "__main__":
    main()
