"""Image regions, the colour scale: what the heat's colours are divided by, so heads can be compared.

The selection's colour scale (:data:`~.palette.SCALES`), as the token maps read it: ``fixed`` 0–1 (the weights are
probabilities), ``shared`` by the block's heads (the largest weight any layer's head gives the image's keys from
this query's row: flip through the heads and the colours keep their meaning) or ``map``, stretched to the drawn
map's own peak (each map as hot as any other, however little it looks at the image).  The log box applies too
(``LOG_DECADES`` decades below the top).  The screen and the figure divide the same smoothed map by the same
:class:`HeatScale`, and the colour bar states its numbers.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from attnviz.core.attention import AttentionResult, PatchGrid
from attnviz.core.view.colourbar import check_scale, colour_range, weight_label


@dataclass(frozen=True)
class HeatScale:
    """The colour scale an overlay is drawn on: weights ``vmin``..``vmax`` (linear from 0, or log) -> 0..1."""

    scale: str  # one of SCALES
    log: bool
    vmin: float
    vmax: float
    by_hand: bool = False  # the top was given (`figure --vmax`), not read from the maps

    def heat(self, smooth: np.ndarray) -> np.ndarray:
        """``[H, W]`` in [0, 1]: the smoothed weights on this scale (below the log scale's bottom: its lowest colour)."""
        if not self.log:
            return np.clip(smooth / self.vmax, 0.0, 1.0)  # (the expression every stretched overlay was drawn with)
        lo, hi = np.log10(self.vmin), np.log10(self.vmax)
        return np.clip((np.log10(np.maximum(smooth, self.vmin)) - lo) / (hi - lo), 0.0, 1.0).astype(np.float32)

    @property
    def label(self) -> str:
        """The colour bar's words, the token maps' own ("attention weight (log scale, shared by the block's heads)")."""
        # (set by hand, the scale's words would name a top, 0–1 or the heads', that is not the one in force)
        return weight_label(self.log, scale=self.scale, vmax=self.vmax if self.by_hand else None)

    @property
    def note(self) -> str:
        """What the colours span, for the screen's info line ("colours span 0–0.077 (stretched to this map)")."""
        how = self.label.partition(" (")[2].rstrip(")")
        if self.scale == "fixed" and not self.log:
            return f"colours {how}"  # "colours fixed 0–1": the range is in the words
        return f"colours span {self.vmin:.3g}–{self.vmax:.3g} ({how})"


def heat_scale(
    scale: str, log: bool, drawn_top: float, shared_top: Callable[[], float], vmax: float | None = None
) -> HeatScale:
    """The scale ``scale`` (with ``log``) of an overlay whose smoothed map peaks at ``drawn_top``; ``shared_top`` is
    asked only for the shared scale (it reads every head's row).  ``vmax``: the top given by hand (``figure
    --vmax``, as the token maps' colour range takes it: :func:`colour_range`), whatever ``scale``."""
    check_scale(scale)
    if vmax:
        lo, hi = colour_range(float(vmax), log, float(vmax))
        return HeatScale(scale, log, lo, hi, by_hand=True)
    # an overlay is one query's row: "row" stretches it to its own peak, as "map" does (and says so in its words)
    scale = "map" if scale == "row" else scale
    top = {"fixed": lambda: 1.0, "shared": shared_top, "map": lambda: drawn_top}[scale]()
    lo, hi = colour_range(top, log, max(top, 1e-6))
    return HeatScale(scale, log, lo, hi)


def image_keys_top(vec: np.ndarray, grid: PatchGrid, whole: PatchGrid | None) -> float:
    """The largest weight ``vec`` (a query's row over a block's keys) gives the image's keys: the grid's, and a tiled
    image's global image's beside it."""
    cells = [grid.to_image(vec)] + ([whole.to_image(vec)] if whole is not None else [])
    return float(
        np.fmax.reduce(np.concatenate([c.ravel() for c in cells]), initial=0.0)
    )  # (a NaN weight: ignored, not the top)


SHARED_TOPS_KEPT = 256  # shared tops remembered per result (one a block, batch row, image and query)
_SHARED_TOPS: dict[int, tuple[weakref.ref, dict[tuple, float]]] = {}


def kept_top(result: AttentionResult, key: tuple, compute: Callable[[], float]) -> float:
    """``compute()`` once per ``result`` and ``key``: the shared top reads every head's row (a VLM decoder's 28 × 16
    heads of 2,000 keys: ~0.4 s), and stepping through the heads on the shared scale asks for the same top again at
    every step.  Kept with the result (a weak reference: results are not hashable), forgotten with it."""
    rid = id(result)
    entry = _SHARED_TOPS.get(rid)
    if entry is None or entry[0]() is not result:

        def forget(_: weakref.ref) -> None:
            _SHARED_TOPS.pop(rid, None)

        entry = (weakref.ref(result, forget), {})
        _SHARED_TOPS[rid] = entry
    tops = entry[1]
    if key not in tops:
        if len(tops) >= SHARED_TOPS_KEPT:
            tops.pop(next(iter(tops)))
        tops[key] = compute()
    return tops[key]
