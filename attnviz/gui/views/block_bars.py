"""The Overview's small colour bars, one beside each block's grid, for a scale per block (a speech model's:
core.view.overview_scale).  They live in the overview's ViewBox, so each stays beside its block's rows whatever the
zoom; the window's one ColorBarItem cannot say three tops."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF

from attnviz.core import view as vm
from attnviz.gui import style

BAR_GAP = 0.2  # cells between a block's grid and its bar
BAR_W = 0.14  # the bar's width, in cells
TICK_PX = 52.0  # pixels right of the bar for its tick labels ("0.186")


@dataclass
class BlockBar:
    """One block's bar: its colour range (display units), its ticks as drawn (weight, text) and its words."""

    levels: tuple[float, float]
    ticks: list[tuple[float, str]]
    label: str
    items: list = field(default_factory=list)  # (the ImageItem and its tick TextItems)


def right_room(cell_px: float) -> float:
    """Cells right of the grid the bars and their tick labels need."""
    return BAR_GAP + BAR_W + TICK_PX / max(cell_px, 1.0)


def draw_bar(vb: pg.ViewBox, x: float, y: float, height: float, top: float, log: bool, label: str) -> BlockBar:
    """A bar from 0 (or the log scale's bottom) at ``y + height`` up to ``top`` at ``y``, at ``x`` in the view's
    cells, its round ticks (the figures' and the colour bar's: vm.scale_ticks) labelled on its right."""
    levels = style.display_levels(np.array([0.0, top]), log)
    lo, hi = levels
    img = pg.ImageItem(np.linspace(hi, lo, 256, dtype=np.float32)[:, None], axisOrder="row-major")
    img.setColorMap(style.colormap())
    img.setLevels(levels)
    img.setRect(QRectF(x, y, BAR_W, height))
    img.setToolTip(label)
    vb.addItem(img, ignoreBounds=True)
    weights = vm.colour_range(top, log)
    ticks = vm.scale_ticks(*weights, log)
    bar = BlockBar(levels, ticks, label, [img])
    for value, text in ticks:
        d = float(style.display_values(np.array([value]), log, levels)[0]) if log else value
        t = pg.TextItem(text, color="#444", anchor=(0, 0.5))
        t.setPos(x + BAR_W + 0.03, y + height * (hi - d) / max(hi - lo, 1e-12))
        t.setToolTip(label)
        vb.addItem(t, ignoreBounds=True)
        bar.items.append(t)
    return bar


def clear_bars(vb: pg.ViewBox, bars: dict[int, BlockBar]) -> None:
    for bar in bars.values():
        for item in bar.items:
            vb.removeItem(item)
    bars.clear()
