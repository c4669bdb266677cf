"""pyqtgraph configuration and the view model's colours (:mod:`attnviz.core.view`) as pyqtgraph objects."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg

from attnviz.core import view as vm

_configured = False

# the names come from the view model: the screen and the figures use the same maps and palette
CMAP_NAME = vm.MAP_CMAP
HEAT_NAME = vm.OVERLAY_CMAP
HEAD_COLORS = list(vm.HEAD_COLOURS)


def configure() -> None:
    """Once per process: row-major images (maps are [query, key]) and antialiasing."""
    global _configured
    if _configured:
        return
    pg.setConfigOptions(imageAxisOrder="row-major", antialias=True, background="w", foreground="k")
    _configured = True


def colormap(name: str = CMAP_NAME) -> pg.ColorMap:
    return pg.colormap.get(name)


def diff_colormap() -> pg.ColorMap:
    """The view model's diverging map for A − B (the colours matplotlib's RdBu_r is made of)."""
    return pg.ColorMap(np.linspace(0.0, 1.0, len(vm.DIFF_COLOURS)), list(vm.DIFF_COLOURS), name=vm.DIFF_CMAP)


def lut(name: str = CMAP_NAME, n: int = 256) -> np.ndarray:
    return colormap(name).getLookupTable(0.0, 1.0, n)


def head_color(i: int) -> str:
    return HEAD_COLORS[i % len(HEAD_COLORS)]


def display_levels(m: np.ndarray, log: bool) -> tuple[float, float]:
    """The view model's colour range, in the units the image holds (log10 of weights on the log scale)."""
    lo, hi = vm.colour_range(float(np.nanmax(m)) if m.size else 1.0, log)
    return (math.log10(lo), math.log10(hi)) if log else (lo, hi)


def display_values(m: np.ndarray, log: bool, levels: tuple[float, float] | None = None) -> np.ndarray:
    """Values as drawn: weights, or log10 of weights floored at the bottom of the log range."""
    if not log:
        return m
    floor = 10.0 ** (levels or display_levels(m, True))[0]
    return np.log10(np.maximum(m, floor)).astype(np.float32)


def colorbar_ticks(levels: tuple[float, float], log: bool) -> list[list[tuple[float, str]]]:
    """A handful of round ticks (the figures' ticks) for a ColorBarItem axis."""
    if log:
        return [[(math.log10(v), text) for v, text in vm.scale_ticks(10.0 ** levels[0], 10.0 ** levels[1], True)]]
    return [list(vm.scale_ticks(*levels, False))]


def set_colorbar(bar: pg.ColorBarItem, levels: tuple[float, float], log: bool, label: str | None = None) -> None:
    """Levels, round ticks and the view model's words (``label``; default the plain weight label)."""
    ticks = colorbar_ticks(levels, log)
    bar.setLevels(levels)
    bar.axis.setTicks(ticks)
    bar.axis.setLabel(label if label is not None else vm.weight_label(log))
    bar.axis.setWidth(colorbar_axis_width(bar.axis, ticks))


COLORBAR_AXIS_MIN = 45  # pyqtgraph's ColorBarItem's fixed axis width: room for "0.5" and the label beside it


def colorbar_axis_width(axis: pg.AxisItem, ticks: list[list[tuple[float, str]]]) -> int:
    """The colour bar's axis width for ``ticks``: pyqtgraph fixes 45 px, room for "0.5", not "0.015" (the label was
    drawn over a small map's stretched ticks).  Measured from the tick font now, as AxisItem's own auto width adds
    it up, not left to that auto width: it is only known after a first paint, and the Head map's long map would
    then be pooled a second time for the narrower view (tests/gui/test_head_map_first_open.py)."""
    from PySide6.QtGui import QFontMetricsF

    st = axis.style
    metrics = QFontMetricsF(st["tickFont"] or axis.font())
    text = max((metrics.horizontalAdvance(t) for level in ticks for _value, t in level), default=0.0)
    label = axis.label.boundingRect().height() * 0.8 if axis.label.isVisible() else 0.0
    return max(COLORBAR_AXIS_MIN, math.ceil(text + st["tickTextOffset"][0] + max(0, st["tickLength"]) + label))
