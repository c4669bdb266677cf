"""Peak memory and time of a tower's Overview with "keep mass" below 100 % (session 17, towerkeep17).

    OMP_NUM_THREADS=1 python bench/tower_overview_filter_bench.py [--heads 2] [--keep 0.5] [--rounds 2] \
        --root BEFORE --root AFTER

SmolVLM's frame and patch counts (17 frames of 1,024 patches: 17,408 keys) as one layer's FramesMap of random
softmax rows, ``--heads`` heads; each ``--root`` (a checkout: its code runs) pools the overview's thumbnails with
``Selection(keep=...)`` (``--hide``: key 0 a special token, hidden) in a fresh process: its ``ru_maxrss`` after building the maps and after the thumbnails, wall
and CPU time.  Rounds interleave the roots, and the thumbnails of every root are compared (bit for bit).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

RUN = """
import resource, sys, time, hashlib
import numpy as np
from attnviz.core import view as v
from attnviz.core.attention import AttentionResult, SiteInfo, TokenAxis
from attnviz.core.frames import FramesMap
heads, keep, hide, frames, p = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "1", 17, 1024
rng = np.random.default_rng(0)
blocks = np.empty((frames, heads, p, p), np.float32)
for f in range(frames):  # softmax rows, one frame at a time (no float64 temporary of the whole layer)
    s = rng.standard_normal((heads, p, p), dtype=np.float32) * 3
    np.exp(s - s.max(-1, keepdims=True), out=s)
    blocks[f] = s / s.sum(-1, keepdims=True)
del s
r = AttentionResult([FramesMap(blocks, [frames])], [SiteInfo("encoder", "self", 0, heads, "n0", "softmax")],
                    TokenAxis([f"p{i}" for i in range(frames * p)], [hide and i == 0 for i in range(frames * p)]))
built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t0, c0 = time.perf_counter(), time.process_time()
th = v.thumbnails(r, v.Selection(mode="mean", keep=keep, hide_special=hide), use_cache=False)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
digest = hashlib.sha256(b"".join(th[k].tobytes() for k in sorted(th))).hexdigest()[:16]
print(built, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, wall, cpu, digest)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--keep", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--hide", action="store_true", help="key 0 special (a CLS) and hidden")
    ap.add_argument("--root", action="append", required=True)
    a = ap.parse_args()
    print(f"17 frames x 1,024 patches, {a.heads} heads, keep {a.keep}, hide {a.hide}; load {os.getloadavg()}")
    for rnd in range(a.rounds):
        for root in a.root:
            env = dict(os.environ, PYTHONPATH=root, OMP_NUM_THREADS="1")
            p = subprocess.run(
                [sys.executable, "-c", RUN, str(a.heads), str(a.keep), str(int(a.hide))],
                env=env,
                capture_output=True,
                text=True,
                cwd=root,
            )
            if p.returncode:
                print(f"  round {rnd} {root}: failed {p.stderr.strip().splitlines()[-1:]}")
                continue
            built, peak, wall, cpu, digest = p.stdout.split()
            print(
                f"  round {rnd} {root}: max RSS {float(built):,.0f} MB after the maps, {float(peak):,.0f} MB after "
                f"the thumbnails; {float(wall):.1f} s wall, {float(cpu):.1f} s CPU; thumbnails {digest}; "
                f"load {os.getloadavg()[0]:.2f}"
            )


if __name__ == "__main__":
    main()
