"""Max-pooling a map in runs of positions: the one pool the Head map, the overview's thumbnails and the figure use.

A map is pooled rows first (a run of ``fq`` rows to one row of maxima), then keys.  Pooled whole, the rows' maxima
of a 30,000-token map at the figure's ~1,000 cells are a 120 MB temporary (and a signed map's negation a 3.6 GB
copy); so :func:`pool_by` pools a band of whole runs of rows at a time, about :data:`BAND_BYTES` of map, and writes
each band's cells into the result: what is held beside the cells is one band's row maxima.  Maxima are exact in
any order and bands end on run borders, so the cells are bit for bit those of the map pooled whole.
"""

from __future__ import annotations

import math

import numpy as np

# rows pooled at once: a band this size and its row maxima stay in the cache for the pass over the keys (pooled
# whole, a 2,562-position region's row maxima went out to memory and back: 8-11 ms against 4-5 ms in bands;
# bench/RESULTS.md session 19 zoom19)
BAND_BYTES = 2 << 20


def _pool_axis(m: np.ndarray, f: int, axis: int, op: np.ufunc = np.maximum) -> np.ndarray:
    """Max (``op=np.minimum``: min) over runs of ``f`` positions along ``axis``; a short last run also counts a 0
    (the zero padding)."""
    n = m.shape[axis]
    full = n - n % f
    lead = (slice(None),) * (axis % m.ndim)
    if axis % m.ndim == m.ndim - 1:
        # along the last axis a reshape's max reduces runs of f contiguous floats, which numpy does element by
        # element (37 ms for a 2,048² head at f = 2, the Head map's every head switch); f strided maxima read the
        # same values in whole rows (0.8 ms).  Maxima are exact in any order: the same cells bit for bit.
        out = m[..., 0:full:f].copy()
        for i in range(1, f):
            op(out, m[..., i:full:f], out=out)
    else:
        whole = m[lead + (slice(0, full),)]
        out = op.reduce(
            whole.reshape(m.shape[: axis % m.ndim] + (full // f, f) + m.shape[axis % m.ndim + 1 :]), axis % m.ndim + 1
        )
    if full < n:
        tail = op(op.reduce(m[lead + (slice(full, n),)], axis=axis, keepdims=True), 0)
        out = np.concatenate([out, tail.astype(out.dtype)], axis=axis)
    return out


def _pool_whole(m: np.ndarray, fq: int, fk: int, signed: bool) -> np.ndarray:
    """:func:`pool_by` of ``m`` in one piece: all its rows' maxima at once (the pool before session 20)."""

    def pool(a: np.ndarray, op: np.ufunc) -> np.ndarray:
        a = _pool_axis(a, fq, -2, op) if fq > 1 else a
        return _pool_axis(a, fk, -1, op) if fk > 1 else a

    if not signed:
        return pool(m, np.maximum)
    # the run's minimum, not minus the maximum of minus the map: no negated copy (the same numbers: negation is exact)
    top, bottom = pool(m, np.maximum), pool(m, np.minimum)
    return np.where(top >= -bottom, top, bottom)


def band_rows(m: np.ndarray, fq: int, signed: bool = False) -> int:
    """Rows of ``[..., Tq, Tk]`` pooled at once: whole runs of ``fq`` (a cell never straddles two bands), as many
    as make about :data:`BAND_BYTES` of temporaries, at least one run.  The band is a view of the map (read, never
    copied); what it makes is a row of maxima a run (each head's; a signed map's minima too), half the budget, and
    their cells.  Sized by the row maxima rather than the map's rows: they stay in the cache for the pass over the
    keys, and that pass costs ``fk`` numpy calls a band (a run a band, a 30,000-token thumbnail's 64 bands of 469
    rows took 30,000 calls, 1.5 x the CPU of pooling it whole; bench/RESULTS.md session 20 view20)."""
    row_bytes = m.dtype.itemsize * m.shape[-1] * math.prod(m.shape[:-2]) * (4 if signed else 2)
    return fq * max(1, BAND_BYTES // max(1, row_bytes))


def pool_by(m: np.ndarray, fq: int, fk: int, signed: bool = False) -> np.ndarray:
    """``[..., Tq, Tk]`` max-pooled in runs of ``fq`` rows and ``fk`` keys from the first position (a short last run
    also counts a 0); ``m`` itself when both are 1.  ``signed`` (an A - B map): each cell keeps its run's value of
    largest magnitude, with its sign, so neither side's peaks fade.  Pooled band by band of rows
    (:func:`band_rows`); ``m`` may be a view (a region of a map): it is never copied."""
    if fq == fk == 1:
        return m
    n = m.shape[-2]
    band = band_rows(m, fq, signed)
    if band >= n:
        return _pool_whole(m, fq, fk, signed)
    out = np.empty((*m.shape[:-2], -(-n // fq), -(-m.shape[-1] // fk)), m.dtype)  # pooling keeps the dtype
    for start in range(0, n, band):
        cells = _pool_whole(m[..., start : start + band, :], fq, fk, signed)
        out[..., start // fq : start // fq + cells.shape[-2], :] = cells
    return out


def pool_to(m: np.ndarray, max_q: int, max_k: int, signed: bool = False) -> tuple[np.ndarray, int, int]:
    """``[..., Tq, Tk]`` max-pooled in runs of ``fq`` rows and ``fk`` keys so it is at most ``max_q`` x ``max_k``
    cells (as :func:`~attnviz.core.view.overview.downsample` pools); returns the map and ``(fq, fk)``.  ``signed``:
    as :func:`pool_by`."""
    fq, fk = -(-m.shape[-2] // max(max_q, 1)), -(-m.shape[-1] // max(max_k, 1))
    return pool_by(m, fq, fk, signed), fq, fk


def pool_note(fq: int, fk: int) -> str:
    """The colour bar's words for a pooled map (screen and figure): `` (max of 4 × 4 positions a cell)``, or
    nothing when every cell is one position."""
    return "" if fq == fk == 1 else f" (max of {fq} × {fk} positions a cell)"
