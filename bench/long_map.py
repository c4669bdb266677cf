"""A long random map with structure visible at every zoom, saved as a .npz that ``attnviz open`` reads.

    python bench/long_map.py --tokens 8192 --out /tmp/long8k.npz

One layer, one head, ``tokens`` x ``tokens`` float32: weights up to 0.02 at random, 0.5 on the diagonal, 0.3 three
positions below it (a line beside the diagonal that merges with it when pooled 4 x 4 or coarser and stands apart
when zoomed in) and 0.2 on every key that is a multiple of 1,000 (thin columns).  Built one band of rows at a time
(a 30,000-token map is 3.6 GB; no second copy).  ``make_map`` gives the array for benchmarks that need no file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

BAND = 1024


def make_map(tokens: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    m = np.empty((1, 1, tokens, tokens), np.float32)
    for r0 in range(0, tokens, BAND):
        band = m[0, 0, r0 : r0 + BAND]
        rng.random(band.shape, dtype=np.float32, out=band)
        band *= 0.02
    i = np.arange(tokens)
    m[0, 0, i, i] = 0.5
    m[0, 0, i[3:], i[:-3]] = 0.3
    m[0, 0, :, ::1000] = 0.2
    return m


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
    from attnviz.core.io import save_npz

    site = SiteInfo("encoder", "self", 0, 1, "synthetic_softmax", "softmax")
    tokens = TokenAxis([f"t{i}" for i in range(args.tokens)])
    print(save_npz(AttentionResult([DenseMap(make_map(args.tokens))], [site], tokens=tokens), args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
