"""The Overview's colour scale, per kind of model: its top (or a top per block), its colour-bar words and its
info-line words, the same on screen and in ``attnviz figure --view overview``.

Every kind but speech draws its thumbnails on the selection's scale as the overview reads it (:func:`overview_top`:
fixed 0–1, or the largest pooled weight of any head).  A speech model's are dim on both: an encoder frame or a
decoder word spreads its weight over the clip's hundreds of frames (the demo's cross-attention peaks at 0.26, its
median cell is 0.004), and the largest weight is the decoder's first row, always 1.0 (a causal row of one key), so
"the largest" is 0–1 again.  Each block (encoder self-attention, decoder self-attention, cross-attention) gets its own
top instead, a high percentile of that block's thumbnails' cells: one scale for every head of a block (the heads of a
block read the same keys; a head that looks harder is brighter than its neighbour, which a scale per thumbnail would
hide), with the structure of the frames visible; the few cells above the top saturate, and the words say so.  One
top over every block (speech30) was the encoder's: its thumbnails' 58 x 58 cells (116 frames, pooled) outnumber the
decoder's 9 x 9 forty to one, so the 99.5th percentile of them all (0.19) painted a third of the decoder
self-attention's cells (its rows spread over 1–9 keys, weights well above 0.19) saturated yellow.  Blocks are not
compared by colour anyway (their keys differ), so each block's colour bar says its own top.

A text encoder–decoder (models/translation.onnx) keeps the selection's scale: its blocks' keys are a sentence's
tokens on every side (5 and 8), its weights reach 0–1 in every block (the demo's 99.5th percentiles 0.85, 1.0 and
0.99), so a percentile would change nothing but the words, and fixed 0–1 is the default that cannot mislead.

A top set by hand (the colour-top box, ``--vmax``) and a scale chosen in the colour-scale box or by ``--scale``
(``Selection.kind_scale`` False) still win: the way back to one absolute scale.

Numpy only: no Qt, no matplotlib.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from attnviz.core.attention import AttentionResult, Block
from attnviz.core.view.colourbar import overview_label, overview_top
from attnviz.core.view.opening import result_kind

# a speech block's top: this percentile of the block's thumbnails' cells (the demo: encoder self-attention 0.11,
# decoder self-attention 1, cross-attention 0.098), its encoder's bands and its cross-attention's word segments shown.
# Chosen when one top spanned every block (speech30): at 99 that top left most decoder self-attention cells saturated
SPEECH_PERCENTILE = 99.5


@dataclass(frozen=True)
class OverviewScale:
    """The tops the thumbnails are drawn up to (0 at the bottom, or the log scale below it), and their words.

    ``tops``: block index -> that block's top; one scale for every block unless ``per_block``."""

    top: float  # one scale's top; with a scale per block, the largest block top (as drawn by no block alone)
    label: str  # the colour bar's label ("attention weight (fixed 0–1)"); per block: each block's bar's
    note: str  # the info line's words ("fixed scale 0–1")
    tops: dict[int, float] = field(default_factory=dict)
    per_block: bool = False

    def top_of(self, block: int) -> float:
        """The top block ``block``'s thumbnails are drawn up to."""
        return self.tops.get(block, self.top)

    @property
    def box_words(self) -> str | None:
        """What the colour-scale box shows while the overview draws this scale, where it is none of the box's own
        (:data:`~.palette.SCALES`); None where it is the box's choice (or a top set by hand, which the box says)."""
        return f"per block: {SPEECH_PERCENTILE:g}th percentile" if self.per_block else None


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


def block_tops(thumbs: dict, q: float = SPEECH_PERCENTILE) -> dict[int, float]:
    """Block index -> the ``q``-th percentile of that block's thumbnails' cells (``thumbs`` keyed (block, layer,
    head), as :func:`~.overview.thumbnails` pools them)."""
    blocks = sorted({key[0] for key in thumbs})
    return {b: percentile_top({k: m for k, m in thumbs.items() if k[0] == b}, q) for b in blocks}


def percentile_label(log: bool, q: float = SPEECH_PERCENTILE) -> str:
    """A block's colour bar's words for a percentile top: one scale for the block's heads, not 0–1, and not their
    largest."""
    how = (["log scale"] if log else []) + [f"this block's: top at the {q:g}th percentile of its heads"]
    return f"attention weight ({', '.join(how)})"


def _speech(thumbs: dict, scale: str, log: bool, vmax: float | None) -> OverviewScale:
    tops = block_tops(thumbs)
    note = f"a scale per block (the {SPEECH_PERCENTILE:g}th percentile of its heads' cells; brighter saturate)"
    return OverviewScale(max(tops.values(), default=1.0), percentile_label(log), note, tops, per_block=True)


# kind (core.view.opening.result_kind) -> its overview scale; a kind not here takes the selection's scale
OVERVIEW_SCALES: dict[str, Callable[[dict, str, bool, float | None], OverviewScale]] = {"speech": _speech}


def overview_colours(
    result: AttentionResult,
    blocks: list[Block],
    thumbs: dict,
    scale: str,
    log: bool,
    vmax: float | None = None,
    kind_scale: bool = True,
) -> OverviewScale:
    """The overview's scale over ``thumbs`` (every block's, as :func:`~.overview.thumbnails` pools them) for
    ``result``'s kind of model, with the selection's ``scale``, ``log`` and top by hand ``vmax``.  The kind's own
    scale (a speech model's per block) only while ``kind_scale`` (no scale chosen in the box or by ``--scale``) and
    no top is set by hand: both win, as on every other view."""
    own = OVERVIEW_SCALES.get(result_kind(result, blocks)) if kind_scale and not vmax else None
    got = (own or _selected)(thumbs, scale, log, vmax)
    if got.per_block:  # the info line names each block's top
        tops = ", ".join(f"{blocks[bi].name} 0–{top:.3g}" for bi, top in got.tops.items() if bi < len(blocks))
        got = replace(got, note=f"{got.note}: {tops}")
    return got


def has_kind_scale(result: AttentionResult | None, blocks: list[Block]) -> bool:
    """Whether ``result``'s kind of model has an overview scale of its own (the colour-scale box offers it)."""
    return result is not None and result_kind(result, blocks) in OVERVIEW_SCALES
