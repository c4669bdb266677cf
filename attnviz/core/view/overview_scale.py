"""The Overview's one colour scale, per kind of model: its top, its colour-bar words and its info-line words, the same
on screen and in ``attnviz figure --view overview``.

Every kind but speech draws its thumbnails on the selection's scale as the overview reads it (:func:`overview_top`:
fixed 0–1, or the largest pooled weight of any head).  A speech model's are dim on both: an encoder frame or a
decoder word spreads its weight over the clip's hundreds of frames (the demo's cross-attention peaks at 0.26, its
median cell is 0.004), and the largest weight is the decoder's first row, always 1.0 (a causal row of one key), so
"the largest" is 0–1 again.  Its thumbnails share one top instead, a high percentile of every thumbnail's cells:
still one scale for every head (a head that looks harder is brighter than its neighbour, which a scale per thumbnail
would hide), with the structure of the frames visible; the few cells above the top saturate, and the words say so.
A top set by hand (the colour-top box, ``--vmax``) still wins: the way back to an absolute scale.

Numpy only: no Qt, no matplotlib.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from attnviz.core.attention import AttentionResult, Block
from attnviz.core.view.colourbar import overview_label, overview_top
from attnviz.core.view.opening import result_kind

# the speech overview's top: this percentile of every thumbnail's cells.  At 99.5 the demo's top is 0.19: its
# cross-attention's word segments and its encoder's bands show, and its decoder self-attention (9 keys, median 0.10)
# stays mid-scale; at 99 (0.13) that block was mostly saturated
SPEECH_PERCENTILE = 99.5


@dataclass(frozen=True)
class OverviewScale:
    """The top every thumbnail is drawn up to (0 at the bottom, or the log scale below it), and its words."""

    top: float
    label: str  # the colour bar's label ("attention weight (fixed 0–1)")
    note: str  # the info line's words ("fixed scale 0–1")


def _selected(thumbs: dict, scale: str, log: bool, vmax: float | None) -> OverviewScale:
    """The selection's scale as every kind but speech reads it: 0–1, the largest weight, or the top by hand."""
    top = overview_top(thumbs, scale, vmax)
    which = "scale" if vmax else "fixed scale" if scale == "fixed" else "shared scale"
    return OverviewScale(top, overview_label(log, scale, vmax), f"{which} 0–{top:.3g}")


def percentile_top(thumbs: dict, q: float = SPEECH_PERCENTILE) -> float:
    """The ``q``-th percentile of every thumbnail's cells (NaN cells left out; 1.0 when there are none)."""
    cells = np.concatenate([np.asarray(m, np.float64).ravel() for m in thumbs.values()] or [np.zeros(0)])
    cells = cells[np.isfinite(cells)]
    return max(float(np.percentile(cells, q)), 1e-6) if cells.size else 1.0


def percentile_label(log: bool, q: float = SPEECH_PERCENTILE) -> str:
    """The colour bar's words for a percentile top: one scale for every head, not 0–1, and not their largest."""
    how = (["log scale"] if log else []) + [f"shared: top at the {q:g}th percentile of all heads"]
    return f"attention weight ({', '.join(how)})"


def _speech(thumbs: dict, scale: str, log: bool, vmax: float | None) -> OverviewScale:
    if vmax:  # a top set by hand wins, as on every other view
        return _selected(thumbs, scale, log, vmax)
    top = percentile_top(thumbs)
    note = f"one scale 0–{top:.3g} (the {SPEECH_PERCENTILE:g}th percentile of all heads' cells; brighter saturate)"
    return OverviewScale(top, percentile_label(log), note)


# kind (core.view.opening.result_kind) -> its overview scale; a kind not here takes the selection's scale
OVERVIEW_SCALES: dict[str, Callable[[dict, str, bool, float | None], OverviewScale]] = {"speech": _speech}


def overview_colours(
    result: AttentionResult, blocks: list[Block], thumbs: dict, scale: str, log: bool, vmax: float | None = None
) -> OverviewScale:
    """The overview's one scale over ``thumbs`` (every block's, as :func:`~.overview.thumbnails` pools them) for
    ``result``'s kind of model, with the selection's ``scale``, ``log`` and top by hand ``vmax``."""
    return OVERVIEW_SCALES.get(result_kind(result, blocks), _selected)(thumbs, scale, log, vmax)
