"""Token links' cut (:data:`LINK_CUTS`, the selection's ``link_cut``): which links are drawn, and how strong.

A link is drawn when it is among its query row's :data:`~attnviz.core.view.links.LINKS_PER_ROW` strongest and its
weight is at least :data:`~attnviz.core.view.links.LINK_MIN` of the cut's reference; its line's width and opacity
say its weight over the cut's shade reference.  The cuts:

- ``row`` (the default): the reference is the query row's own largest weight, the shade its share of the row's
  attention (its weight over the row's sum: for a softmax row the weight itself, BertViz's opacity).  Each query
  token shows its strongest links, as BertViz and the attention-flow line figures read: a causal map's row ``i``
  spreads its mass over ``i`` keys, so on a long input (512–4,096 tokens) every weight past the first few dozen
  rows lies far below the map's top (early rows hold weights near 1), and a cut against the map's top left those
  rows with no link at all.  Why these two references: a per-row mass cut (the fewest weights holding p of the
  row) keeps hundreds of a flat row's near-equal weights, so it always hits the per-row cap and says no more than
  the row's maximum does; against the maximum a peaked row shows its one or two links and a flat row its cap.
  Shaded against the row's maximum too, a flat row's twelve links, each holding 1/i of its attention, were drawn
  as bold as a peaked row's one link holding nine tenths (on a random-init GPT-2 at 2,048 tokens: a wall of
  full-strength lines); its share of the row draws them faint, which is what they are.
- ``map``: both references are the largest weight in all maps drawn (every overlaid head).  Links compare across
  rows (a row that looks nowhere in particular has none), as Token links drew before there was a choice; a
  recipe written then draws with it.

Screen and figure read the same selection, so they draw the same links.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from attnviz import AttnvizError


def nan_max(m: np.ndarray) -> np.ndarray:
    """The largest number of each row of ``m`` (NaN passed over; a row of NaN: NaN); ``max`` first, as ``fmax``
    takes twice its time over a long map and a map seldom holds a NaN."""
    top = m.max(axis=-1)
    bad = np.isnan(top)
    if bad.any():
        with np.errstate(invalid="ignore"):
            top[bad] = np.fmax.reduce(m[bad], axis=-1)
    return top


def _row_tops(mats: list[np.ndarray], _vmax: float | None) -> list[np.ndarray]:
    # NaN ignored (a row of NaN: no reference, no links); a row of zeros (padding, masked) has no links either
    out = []
    for m in mats:
        m = np.asarray(m)
        if m.ndim != 2 or not m.size:
            out.append(np.zeros((m.shape[0] if m.ndim else 0, 1)))
            continue
        out.append(nan_max(m).astype(np.float64)[:, None])
    return out


def _row_sums(mats: list[np.ndarray], _vmax: float | None) -> list[np.ndarray]:
    return [nan_sum(np.asarray(m)).reshape(-1, 1) for m in mats]


def nan_sum(m: np.ndarray) -> np.ndarray:
    """Each row's sum in float64, NaN passed over (a row of NaN: 0): ``sum`` first and ``nansum`` only for the
    rows it made NaN, as ``nansum`` copies the whole map to zero its NaN (24 ms where ``sum`` takes 10, at 4,096 tokens)."""
    if m.ndim != 2:  # (not a map: as nansum has it)
        return np.asarray(np.nansum(m, axis=1, dtype=np.float64))
    total = m.sum(axis=1, dtype=np.float64)
    bad = np.isnan(total)
    if bad.any():
        total[bad] = np.nansum(m[bad], axis=1, dtype=np.float64)
    return total


def _map_top(mats: list[np.ndarray], vmax: float | None) -> list[np.ndarray]:
    top = float(vmax) if vmax else max((float(np.asarray(m).max()) for m in mats if np.asarray(m).size), default=1.0)
    top = top or 1.0
    return [np.full((np.asarray(m).shape[0] if np.asarray(m).ndim else 0, 1), top) for m in mats]


@dataclass(frozen=True)
class LinkCut:
    """One reference for token links: the chooser's words and, per matrix, each row's reference ``[Tq, 1]``."""

    name: str
    text: str  # the chooser's entry
    tip: str  # what it does, in a sentence (the chooser's tooltip)
    against: str  # the key's words for the cut's reference ("its query token's strongest link", "the top weight")
    shaded: str  # the key's words for what a line's width and opacity say
    # per matrix ``[Tq, 1]``: each row's reference for the cut, and for the shade (given the maps and a set top)
    tops: Callable[[list[np.ndarray], float | None], list[np.ndarray]]
    shades: Callable[[list[np.ndarray], float | None], list[np.ndarray]]


LINK_CUTS: dict[str, LinkCut] = {
    c.name: c
    for c in (
        LinkCut(
            "row",
            "each token's strongest",
            "every query token shows its strongest links (at least 5 % of its strongest), however long the input; "
            "a line is as strong as its share of the token's attention",
            "its query token's strongest link",
            "its share of its query token's attention (full: all of it)",
            _row_tops,
            _row_sums,
        ),
        LinkCut(
            "map",
            "the top weight",
            "every link measured against the largest weight drawn: links compare across tokens (on a long causal "
            "input, the later tokens' spread-out weights fall under the cut and show no links)",
            "the top weight",
            "the weight (full at the top weight)",
            _map_top,
            _map_top,
        ),
    )
}
DEFAULT_LINK_CUT = "row"
RECIPE_LINK_CUT = "map"  # a recipe written before there was a choice was drawn against the map's top


def check_link_cut(name: str) -> LinkCut:
    """The cut ``name`` names, else one line naming the cuts (an AttnvizError: :mod:`.selection`, where ViewError
    lives, takes DEFAULT_LINK_CUT from here)."""
    if name not in LINK_CUTS:
        raise AttnvizError(f"unknown link cut {name!r}; use one of {', '.join(LINK_CUTS)}", param="link_cut")
    return LINK_CUTS[name]
