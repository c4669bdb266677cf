"""The Head map of a map longer than the screen, zoomed: which positions to pool, how coarsely, and the cells.

The window draws such a map max-pooled (a 30,000-token map coloured whole was a 3.6 GB picture).  Pooled once for
the whole map, a zoomed-in view showed the whole map's blocky cells where the visible positions now have a pixel
each; so the view asks :func:`plan_region` for the region to draw at its range and pixel size: the visible
positions plus a margin each side, pooled in runs of ``ceil(positions / pixels)`` a side (1 when each position
gets a pixel or more).  MapRegion borders fall on multiples of the runs, so every cell is the cell the whole map
pooled at those runs would have (panning never shifts the grid) and only the map's last run can be short.  The
region's cells number at most about (1 + 2 x :data:`MARGIN`) x the pixels a side, whatever the map's length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attnviz.core.view.pooling import pool_by, pool_note

# each side of the visible positions pooled too, as a fraction of the visible span: a pan of up to this much is still
# drawn while the re-pool waits, and needs no re-pool at all.  A quarter made a 2,048-position region's re-pool
# 21 ms of CPU (2.25 x the visible cells pooled and painted; bench/zoom_bench.py), over the 16 ms of a head switch
MARGIN = 0.125


@dataclass(frozen=True)
class MapRegion:
    """Positions ``q0 <= row < q1`` x ``k0 <= key < k1`` of a map, drawn in cells of ``fq`` x ``fk`` positions
    (``q0``, ``k0`` multiples of them; ``q1``, ``k1`` too unless at the map's end)."""

    q0: int
    q1: int
    k0: int
    k1: int
    fq: int
    fk: int

    @property
    def cells(self) -> tuple[int, int]:
        """Rows x columns of cells (a short last run is a whole cell)."""
        return -(-(self.q1 - self.q0) // self.fq), -(-(self.k1 - self.k0) // self.fk)

    @property
    def rect(self) -> tuple[int, int, int, int]:
        """Where the cells lie in position coordinates: ``(key, row, width, height)``; a short last run's cell
        reaches past the map's end, as the whole map's pooling draws it."""
        rows, cols = self.cells
        return self.k0, self.q0, cols * self.fk, rows * self.fq

    @property
    def note(self) -> str:
        return pool_note(self.fq, self.fk)

    def holds(self, other: MapRegion) -> bool:
        """Whether this drawn region already shows ``other`` (the positions a view needs) at its runs."""
        return (
            (self.fq, self.fk) == (other.fq, other.fk)
            and self.q0 <= other.q0
            and other.q1 <= self.q1
            and self.k0 <= other.k0
            and other.k1 <= self.k1
        )


def run_length(span: float, pixels: float) -> int:
    """Positions a cell when ``span`` positions are shown over ``pixels``: at least one pixel a cell."""
    if pixels <= 0:
        return 1
    return max(1, math.ceil(span / pixels - 1e-9))  # 2,048.0000001 / 1,024 is still 2 (range arithmetic)


def _axis(n: int, lo: float, hi: float, px: float, margin: float) -> tuple[int, int, int] | None:
    f = run_length(hi - lo, px)
    pad = margin * (hi - lo)
    start = max(0, math.floor(lo - pad))
    stop = min(n, math.ceil(hi + pad - 1e-9))
    if stop <= start:
        return None  # the view lies beside the map
    start -= start % f  # on the runs' grid
    stop = min(n, -(-stop // f) * f)
    return start, stop, f


def plan_region(
    shape: tuple[int, int],
    x_range: tuple[float, float],
    y_range: tuple[float, float],
    pixels: tuple[float, float],
    margin: float = MARGIN,
) -> MapRegion | None:
    """The region of a ``(Tq, Tk)`` map to draw for a view of keys ``x_range`` and rows ``y_range`` (position
    coordinates, cell i spanning i..i+1) over ``pixels = (width, height)`` device pixels; None when the view shows
    none of the map."""
    (x0, x1), (y0, y1) = sorted(x_range), sorted(y_range)
    keys = _axis(shape[1], x0, x1, pixels[0], margin)
    rows = _axis(shape[0], y0, y1, pixels[1], margin)
    if keys is None or rows is None:
        return None
    return MapRegion(rows[0], rows[1], keys[0], keys[1], rows[2], keys[2])


def pool_region(m: np.ndarray, region: MapRegion, signed: bool = False) -> np.ndarray:
    """The region's cells of ``[..., Tq, Tk]``: each the max of its positions (``signed``: the largest magnitude,
    as :func:`~attnviz.core.view.pooling.pool_by`).  Only the region is read -- a view of it is pooled, band by
    band of rows, with no copy of it or the map -- and at one position a cell it is the region itself (a view)."""
    return pool_by(m[..., region.q0 : region.q1, region.k0 : region.k1], region.fq, region.fk, signed)
