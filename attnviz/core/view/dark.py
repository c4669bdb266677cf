"""A map drawn almost wholly in the colour scale's bottom colour says so, and which scale shows it.

Past a few hundred tokens a causal map is dark on every whole-map scale: row i spreads over i + 1 keys (weights near
1/i), while the top is row 0's 1.0 (its first query sees only itself).  A researcher opening a 2,000-token text saw a
black square and nothing saying why; the row scale (each query row on its own top) shows where each row looks."""

from __future__ import annotations

import math

import numpy as np

from attnviz.core.setting_words import Wording, fix
from attnviz.core.view.maps import MapView

DARK_LEVEL = 0.05  # of the colour top: a cell below it is drawn in (nearly) the bottom colour
# the share of the map's attention weight (its rows' mass, not its cells: an identity map's 1/n bright cells are a
# clear diagonal) that lies in such cells, from which the map reads as a dark square
DARK_SHARE = 0.9
DARK_MIN_CELLS = 64 * 64  # a small map's few bright cells are seen; the note is for long maps
SAMPLED_CELLS = 1 << 18  # the cells read (whole rows): the share of a smooth map's weight to well under a percent


def dark_note(mv: MapView, log: bool, wording: Wording | None = None) -> str | None:
    """The note for ``mv`` drawn on a linear scale whose top leaves ≥ 90 % of its weight in cells below 5 % of it,
    naming the scale that shows it (in the asker's words: a flag, or the window's box); None otherwise (the row
    scale, the log scale, a top set by hand, a signed difference, a small map)."""
    m = np.asarray(mv.matrix)
    if log or mv.diverging or mv.by_hand or mv.scale == "row" or m.ndim != 2 or m.size < DARK_MIN_CELLS:
        return None
    # whole rows, evenly spaced, at most SAMPLED_CELLS of them: each row's weight is all there, so the share is the
    # map's (a shifted diagonal stays whole), and a head switch at 4,096 tokens does not scan 16 M cells (58 ms at
    # 2,048 tokens when every cell was read, against the window's 16-ms switch)
    step = max(1, -(-m.size // SAMPLED_CELLS))
    cells = np.nan_to_num(m[::step].astype(np.float64, copy=False), nan=0.0, posinf=0.0, neginf=0.0)
    top = float(mv.vmax) if mv.vmax else 1.0
    mass = float(cells.sum())
    if mass <= 0 or top <= 0:
        return None
    dark = float(cells[cells < DARK_LEVEL * top].sum()) / mass
    if dark < DARK_SHARE:
        return None
    return (
        f"{math.floor(dark * 1000) / 10:g}% of this map's attention weight is in cells below {DARK_LEVEL * top:.2g} "
        f"on its colour scale (top {top:.3g}), drawn nearly in its bottom colour; {fix('dark_map', wording)}"
    )
