"""Colours and pyqtgraph configuration shared by all views."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

_configured = False

CMAP_NAME = "viridis"
HEAT_NAME = "inferno"
# distinct colours for overlaid heads (tab10)
HEAD_COLORS = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
]
LOG_FLOOR = 1e-4


def configure() -> None:
    """Once per process: row-major images (maps are [query, key]) and antialiasing."""
    global _configured
    if _configured:
        return
    pg.setConfigOptions(imageAxisOrder="row-major", antialias=True, background="w", foreground="k")
    _configured = True


def colormap(name: str = CMAP_NAME) -> pg.ColorMap:
    return pg.colormap.get(name)


def lut(name: str = CMAP_NAME, n: int = 256) -> np.ndarray:
    return colormap(name).getLookupTable(0.0, 1.0, n)


def head_color(i: int) -> str:
    return HEAD_COLORS[i % len(HEAD_COLORS)]


def display_values(m: np.ndarray, log: bool) -> np.ndarray:
    """Values as drawn: weights, or log10 of weights floored at LOG_FLOOR."""
    if not log:
        return m
    return np.log10(np.maximum(m, LOG_FLOOR)).astype(np.float32)


def display_levels(m: np.ndarray, log: bool) -> tuple[float, float]:
    if log:
        return float(np.log10(LOG_FLOOR)), 0.0
    hi = float(np.nanmax(m)) if m.size else 1.0
    return 0.0, hi if hi > 0 else 1.0
