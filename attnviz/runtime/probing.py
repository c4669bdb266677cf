"""A model's probe: one short run on dummy inputs confirms what the graph alone only guesses (a single-stack
graph's causal maps mean a decoder) and counts each site's heads."""

from __future__ import annotations

import numpy as np

from attnviz.runtime.inputs import IOInfo

PROBE_MAX_ELEMENTS = 1 << 20  # per dummy input (a 3x512x512 image); above it no probe runs (issue 9: 6.4 GB)


def dummy_feeds(inputs: list[IOInfo], roles: dict[str, str]) -> dict[str, np.ndarray] | None:
    """Small inputs of the declared dtypes for a probe run (the free axes 6 long, a cache empty, masks all ones,
    positions counting up), or None when an input's dtype has no dummy or a declared size makes the run costly."""
    feeds = {}
    for i in inputs:
        role = roles[i.name]
        shape = []
        for ax, d in enumerate(i.shape):
            if isinstance(d, int) and d > 0:
                shape.append(d)
            elif ax == 0:
                shape.append(1)
            else:
                shape.append(0 if role == "past" else 6)
        dt = np.dtype(i.dtype) if i.dtype in ("float32", "float16", "int64", "int32", "bool") else None
        if dt is None:
            return None
        if int(np.prod(shape)) > PROBE_MAX_ELEMENTS:
            return None  # a declared input size this big would make the "short" run costly: labels stay static
        if role == "image" or dt.kind == "f":
            feeds[i.name] = np.random.default_rng(0).standard_normal(shape).astype(dt)
        elif role in ("mask", "decoder_mask"):
            feeds[i.name] = np.ones(shape, dt)
        elif role in ("positions", "cache_position"):
            feeds[i.name] = np.broadcast_to(np.arange(shape[-1], dtype=dt), shape).copy()
        elif dt == np.bool_:
            feeds[i.name] = np.zeros(shape, dt)
        else:
            feeds[i.name] = np.full(shape, 1, dt)
    return feeds


def stack_of(m) -> str | None:
    """What a single-stack graph's first map says it is: causal (nothing above the diagonal) a decoder, else an
    encoder; None when the map is too short or not square to tell."""
    _, _, tq, tk = m.shape
    if tq < 3 or tq != tk:
        return None
    h = m.head(0, 0)
    upper = float(np.abs(np.triu(h, 1)).sum())
    causal = upper < 1e-6
    return "decoder" if causal else "encoder"
