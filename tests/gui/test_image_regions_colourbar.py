"""Image regions draws the heat's colour bar, as the exported figure does: 0 at the bottom, the map's largest drawn
weight at the top, in the overlay's colours (the window said only "colours span 0–0.077" in its info line, so the
colours had no numbers beside them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gui_helpers import open_and_wait
from PySide6.QtCore import QRectF

from attnviz.core import view as vm
from attnviz.gui import style

DEMO = Path(__file__).resolve().parents[2] / "models" / "vit-classification.onnx"


def _rgb_at(img, x: int, y: int) -> np.ndarray:
    c = img.pixelColor(x, y)
    return np.array([c.red(), c.green(), c.blue()])


def test_the_heat_has_its_colour_bar(qtbot, real_window):
    w = real_window
    open_and_wait(qtbot, w, DEMO)
    w.select_view("image")
    w.session.select(scale="map")  # the stretched scale (the others: tests/gui/test_image_scale_gui.py)
    v = w.image_regions
    s = w.session
    bi, _grid, _kind = v.source()
    img = v.base_image(_grid)
    want = vm.overlay_view(s.result, s.sel, img.shape[:2]).vmax  # the figure's top (draw_image's Normalize)
    assert 0.0 < want <= v.patch_map.max()  # the smoothed heat's top: the map's peak, spread over its patch
    bar = v.colorbar
    assert bar.isVisible()
    lo, hi = bar.levels()
    assert lo == 0.0 and hi == want
    assert bar.axis.labelText == vm.weight_label(False, scale="map")
    assert f"0–{want:.3g} (stretched to this map)" in v.info.text()
    # the bar lies inside the view, right of the picture, and its colours are the overlay's colour map
    grab = v.glw.grab().toImage()
    bar_rect = v.glw.mapFromScene(bar.bar.sceneBoundingRect()).boundingRect()
    assert v.glw.rect().contains(bar_rect)
    pic = v.glw.mapFromScene(v.vb.sceneBoundingRect()).boundingRect()
    assert bar_rect.left() >= pic.right() - 1
    lut = style.lut(style.HEAT_NAME)
    x = bar_rect.center().x()
    top = _rgb_at(grab, x, bar_rect.top() + 3)
    bottom = _rgb_at(grab, x, bar_rect.bottom() - 3)
    assert np.abs(top - lut[-1][:3].astype(int)).max() <= 12, (top, lut[-1])
    assert np.abs(bottom - lut[0][:3].astype(int)).max() <= 12, (bottom, lut[0])


def test_the_colour_bar_runs_as_high_as_the_picture(qtbot, real_window):
    """The view box keeps the square picture square: in a view taller than wide the picture is letterboxed, and the
    bar beside it spans the picture's top to its bottom, not the plot's full height (a GUI walk found it longer)."""
    w = real_window
    open_and_wait(qtbot, w, DEMO)
    w.select_view("image")
    v = w.image_regions
    h, wd = v._image_size

    def rects():
        pic = v.glw.mapFromScene(v.vb.mapViewToScene(QRectF(0, 0, wd, h))).boundingRect()
        bar = v.glw.mapFromScene(v.colorbar.bar.sceneBoundingRect()).boundingRect()
        return pic, bar

    for size in ((1300, 1000), (1300, 600)):  # the picture letterboxed above and below, then filling the height
        w.resize(*size)

        def aligned():
            pic, bar = rects()
            return abs(bar.top() - pic.top()) <= 1 and abs(bar.bottom() - pic.bottom()) <= 1

        qtbot.waitUntil(aligned, timeout=3000)
    w.resize(1300, 1000)
    qtbot.waitUntil(aligned, timeout=3000)
    pic, bar = rects()
    assert pic.height() < v.glw.height() - 40  # the case at hand: a picture shorter than the plot
    # the bar's colours reach its ends: the top colour at the picture's top, the bottom colour at its bottom
    grab = v.glw.grab().toImage()
    lut = style.lut(style.HEAT_NAME)
    x = bar.center().x()
    assert np.abs(_rgb_at(grab, x, pic.top() + 2) - lut[-1][:3].astype(int)).max() <= 12
    assert np.abs(_rgb_at(grab, x, pic.bottom() - 2) - lut[0][:3].astype(int)).max() <= 12


def test_the_colour_bar_label_clears_its_tick_labels(qtbot, real_window):
    """pyqtgraph's ColorBarItem fixes its axis at 45 px: enough for "0.5" and the label beside it, not for a small
    map's stretched ticks ("0.015", "0.06"), over which the label was drawn (an audit's Idefics3 screenshot). The
    label's left edge lies right of the longest tick label's right edge, measured with the tick font's metrics."""
    from PySide6.QtGui import QFontMetricsF

    w = real_window
    open_and_wait(qtbot, w, DEMO)
    w.select_view("image")
    ax = w.image_regions.colorbar.axis
    ticks = [text for level in ax._tickLevels for _value, text in level]
    assert any(len(t) >= 4 for t in ticks), ticks  # the case at hand: ticks longer than "0.5"
    widest = max(QFontMetricsF(ax.style["tickFont"] or ax.font()).horizontalAdvance(t) for t in ticks)

    def clear():
        # a right-hand axis draws its tick labels from its left edge (its geometry's: the bounding rect also holds the
        # inward ticks), after the tick's length when it points outward and the text offset; the label (turned a
        # quarter) draws its words its document's margin inside its box
        text_right = ax.mapToScene(0.0, 0.0).x() + max(0, ax.style["tickLength"]) + ax.style["tickTextOffset"][0]
        words_left = ax.label.sceneBoundingRect().left() + ax.label.document().documentMargin()
        return words_left >= text_right + widest

    qtbot.waitUntil(clear, timeout=3000)
