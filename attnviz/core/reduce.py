"""Reductions over heads and layers: mean/max/min, attention rollout, thresholds, row filtering."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

HEAD_AGGREGATES = ("mean", "max", "min")
# numpy's reducers are overloaded, so a dict of them is typed by the one call shape used here
_HEAD_REDUCERS: dict[str, Callable[..., np.ndarray]] = {"mean": np.mean, "max": np.max, "min": np.min}


def aggregate_heads(layer_maps: np.ndarray, how: str = "mean") -> np.ndarray:
    """``[H, Tq, Tk]`` -> ``[Tq, Tk]``.  One head is its own mean, max and min, bit for bit: handed back as a view
    of ``layer_maps`` (read only by every caller) rather than reduced into a copy -- a crafted one-head 30,000-token
    map's 3.6 GB was made twice between loading and drawing."""
    fn = _HEAD_REDUCERS.get(how)
    if fn is None:
        raise ValueError(f"unknown head aggregate {how!r}; use one of {', '.join(HEAD_AGGREGATES)}")
    a = np.asarray(layer_maps, dtype=np.float32)
    return a[0] if a.shape[0] == 1 else fn(a, axis=0)


def rollout(layers: list[np.ndarray] | np.ndarray, head_fusion: str = "mean", residual: float = 0.5) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema 2020) over ``[L, H, T, T]`` self-attention.

    Each layer's fused heads are mixed with the identity for the residual path
    (``residual * I + (1 - residual) * A``, the paper's 0.5), rows renormalised, then multiplied
    from the first layer up.  Returns ``[T, T]``: row i says how much input token j flows into
    position i at the top.
    """
    mats = [aggregate_heads(l, head_fusion) for l in layers]
    if not mats:
        raise ValueError("rollout needs at least one layer")
    t = mats[0].shape[0]
    if any(m.shape != (t, t) for m in mats):
        raise ValueError("rollout needs square self-attention maps of one size")
    eye = np.eye(t, dtype=np.float64)
    out = eye
    for a in mats:
        a = residual * eye + (1.0 - residual) * a.astype(np.float64)
        a = a / np.maximum(a.sum(axis=-1, keepdims=True), 1e-12)
        out = a @ out
    return out.astype(np.float32)


def keep_mass(m: np.ndarray, fraction: float) -> np.ndarray:
    """Keep, per row, the largest weights that together hold ``fraction`` of the row's mass; zero the rest."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError("fraction must be in (0, 1]")
    m = np.asarray(m, dtype=np.float32)
    if fraction >= 1.0:
        return m.copy()
    order = np.argsort(-m, axis=-1)
    sorted_vals = np.take_along_axis(m, order, axis=-1)
    total = sorted_vals.sum(axis=-1, keepdims=True)
    csum = np.cumsum(sorted_vals, axis=-1)
    # keep an entry while the mass before it is still below the target
    keep_sorted = (csum - sorted_vals) < fraction * total
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, axis=-1)
    return np.where(keep, m, 0.0).astype(np.float32)


def _kept(drop: np.ndarray) -> slice | np.ndarray:
    """The positions kept: a slice when they are one run (special tokens at the ends), so nothing is copied."""
    keep = np.flatnonzero(~np.asarray(drop, bool))
    if keep.size and keep[-1] - keep[0] + 1 == keep.size:
        return slice(int(keep[0]), int(keep[-1]) + 1)
    return keep


def drop_positions(m: np.ndarray, drop_q: np.ndarray, drop_k: np.ndarray, renormalize: bool = True) -> np.ndarray:
    """Remove query rows / key columns (e.g. special tokens) of ``[..., Tq, Tk]``; optionally make rows sum to 1
    again.  Always a new array.  Kept runs are sliced and the rest taken, so each row stays contiguous and is
    summed the same way whatever is dropped (boolean indexing of columns would hand back a column-major copy
    that is slow to read at 2,048 tokens and sums each row in another order)."""
    m = np.asarray(m, dtype=np.float32)
    rows, cols = _kept(drop_q), _kept(drop_k)
    m = m[..., rows, :] if isinstance(rows, slice) else np.take(m, rows, axis=-2)
    m = m[..., cols] if isinstance(cols, slice) else np.take(m, cols, axis=-1)
    if not renormalize:
        return np.array(m)
    s = m.sum(axis=-1, keepdims=True)
    return np.divide(m, s, out=np.zeros(m.shape, np.float32), where=s > 0)
