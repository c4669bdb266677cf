"""The colour bar: its ticks, its range and its words, the same on screen and in figures.

Which scale a map is on (:data:`~.palette.SCALES`), where its ticks go (round values, decades on a log scale, the
top always labelled) and what its label says (hidden special tokens, log scale, fixed / shared / stretched).  The
top of a "shared" scale needs the overview's thumbnails, so :func:`~.overview.scale_top` lives there.
"""

from __future__ import annotations

import math

from attnviz.core.view.palette import LOG_DECADES, SCALES, SPAN_SCALES
from attnviz.core.view.selection import ViewError

CBAR_TICKS = 5  # a colour bar carries about this many tick labels


def nice_ticks(lo: float, hi: float, n: int = CBAR_TICKS) -> list[float]:
    """About ``n`` round tick values (steps of 1, 2, 2.5 or 5 times a power of ten) inside [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, n - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * 0.999)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def scale_ticks(lo: float, hi: float, log: bool) -> list[tuple[float, str]]:
    """A colour bar's ticks as (weight, label), the same on screen and in figures: round values (decades on a log
    scale), and the top of the scale always labelled with its value, so a scale stretched to a map's largest
    weight says what that weight is (a round tick too close under it gives way).  A signed scale symmetric about 0
    (A − B at ±max |A − B|) is labelled as its mirror image: its bottom says −max as its top says max (before, a
    0.247 top sat over a -0.2 bottom, and the bar read as lopsided)."""
    if not log and lo < 0 < hi and math.isclose(-lo, hi, rel_tol=1e-9):
        upper = [(t, text) for t, text in _top_labelled(lo, hi, False) if t > 0]  # the whole bar's spacing
        return [(-t, f"-{text}") for t, text in reversed(upper)] + [(0.0, "0")] + upper
    return _top_labelled(lo, hi, log)


def _top_labelled(lo: float, hi: float, log: bool) -> list[tuple[float, str]]:
    ticks = log_ticks(hi) if log else nice_ticks(lo, hi)
    out = [(t, f"{t:g}") for t in ticks]
    if not (math.isfinite(hi) and hi > lo) or (ticks and abs(hi - ticks[-1]) <= 1e-9 * max(1.0, abs(hi))):
        return out
    below = ticks[-2] if len(ticks) > 1 else lo
    if ticks and (ticks[-1] - below) > 0 and (hi - ticks[-1]) < 0.4 * (ticks[-1] - below) and not log:
        out.pop()
    elif ticks and log and hi / ticks[-1] < 2.5:
        out.pop()
    return [*out, (hi, f"{hi:.3g}")]


def log_ticks(vmax: float) -> list[float]:
    """Decade ticks for the log scale (``LOG_DECADES`` below ``vmax``)."""
    top = math.floor(math.log10(max(vmax, 1e-30)))
    return [10.0**e for e in range(top - LOG_DECADES + 1, top + 1)]


def colour_range(matrix_max: float, log: bool, vmax: float | None = None) -> tuple[float, float]:
    """``(vmin, vmax)`` of a colour scale: linear from 0, or ``LOG_DECADES`` decades below the top."""
    top = float(vmax) if vmax else max(float(matrix_max), 1e-6)
    return (top * 10.0**-LOG_DECADES, top) if log else (0.0, top)


HIDDEN_NOTE = "special tokens hidden"  # a map's note (and title part) when hiding special tokens dropped some


def by_hand(vmax: float) -> str:
    """A scale's words when its top was set by hand (the scale's own words would name a top not in force)."""
    return f"top {vmax:.3g} set by hand"


def scale_words(scale: str, spanned: bool = False) -> str:
    """What a colour scale's top is, in words; ``spanned``: over a window of positions drawn (the span's top)."""
    return SPAN_SCALES.get(check_scale(scale), SCALES[scale]) if spanned else SCALES[check_scale(scale)]


def weight_label(
    log: bool, hide_special: bool = False, scale: str | None = None, vmax: float | None = None, spanned: bool = False
) -> str:
    """The colour-bar label, the same words on screen and in print: what the colours are, and on which scale
    ("attention weight (log scale, fixed 0–1)"; with ``vmax``, the top set by hand: "top 0.5 set by hand";
    ``spanned``: the top is a drawn window's, "stretched to the drawn span")."""
    label = "attention (special tokens removed, rows renormalised)" if hide_special else "attention weight"
    which = by_hand(vmax) if vmax else scale_words(scale, spanned) if scale is not None else None
    how = (["log scale"] if log else []) + ([which] if which else [])
    return label + (f" ({', '.join(how)})" if how else "")


def notes_label(
    notes: list[str], log: bool, scale: str | None = None, vmax: float | None = None, spanned: bool = False
) -> str:
    """The colour-bar label of a drawn map (its ``notes``): it speaks of removed tokens only when some were, and
    says which colour scale it is on (``scale``, one of SCALES; ``vmax``: a top set by hand; ``spanned``: the top
    is the drawn window's)."""
    return weight_label(log, HIDDEN_NOTE in notes, scale, vmax, spanned)


def check_scale(name: str) -> str:
    if name not in SCALES:
        raise ViewError(f"unknown colour scale {name!r}; use one of {', '.join(SCALES)}", param="scale")
    return name


def overview_scale(scale: str) -> str:
    """The overview compares every head on one scale: fixed 0–1, else shared (a scale per thumbnail would make
    every head look alike)."""
    return "fixed" if check_scale(scale) == "fixed" else "shared"


def overview_label(log: bool, scale: str, vmax: float | None = None) -> str:
    """The overview's colour-bar words: its shared scale spans every block's heads, not one block's (``vmax``: a
    top set by hand)."""
    which = by_hand(vmax) if vmax else SCALES["fixed"] if overview_scale(scale) == "fixed" else "shared by every head"
    how = (["log scale"] if log else []) + [which]
    return f"attention weight ({', '.join(how)})"


def overview_top(thumbs: dict, scale: str, vmax: float | None = None) -> float:
    """The top of the overview's one colour scale over every block's thumbnails (``vmax``: the top set by hand)."""
    if vmax:
        return float(vmax)
    if overview_scale(scale) == "fixed":
        return 1.0
    return max(max((float(m.max()) for m in thumbs.values() if m.size), default=1.0), 1e-6)
