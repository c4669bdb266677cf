"""The Head map of a map longer than the screen, zoomed in, panned and resized: once the view settles the visible
region (and a margin) is pooled again from the full map to the view's pixels -- one position a cell when they
fit -- drawn over its positions, the colour bar saying how many positions a cell holds, hover naming real ones.
The screen is shrunk to 200 pixels so that a 600 x 900 map stands for a long one; what is drawn is checked against
numpy's max over blocks of the map's region (or the region itself)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gui_helpers import shown_heatmap
from PySide6.QtCore import QPoint, QPointF, QRectF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication

from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
from attnviz.core.view.zoom import MARGIN
from attnviz.gui.views.heatmap import HeatmapWidget

TQ, TK, SCREEN = 600, 900, 200


def _by_hand(m: np.ndarray, fq: int, fk: int) -> np.ndarray:
    """Max over blocks of fq x fk positions, a short last block padded with zeros."""
    pq, pk = math.ceil(m.shape[0] / fq) * fq, math.ceil(m.shape[1] / fk) * fk
    padded = np.zeros((pq, pk), m.dtype)
    padded[: m.shape[0], : m.shape[1]] = m
    return padded.reshape(pq // fq, fq, pk // fk, fk).max(axis=(1, 3))


def _map() -> tuple[vm.MapView, np.ndarray]:
    rng = np.random.default_rng(19)
    m = rng.random((1, 1, TQ, TK), dtype=np.float32) * 0.02
    i = np.arange(TQ)
    m[0, 0, i, i] = 0.5  # a diagonal, and a line 3 positions below it: one line when pooled, two when zoomed in
    m[0, 0, i[3:], i[:-3]] = 0.3
    site = SiteInfo("encoder", "cross", 0, 1, "softmax_0", "softmax")
    result = AttentionResult(
        [DenseMap(m)],
        [site],
        tokens=TokenAxis([f"q{i}" for i in range(TQ)]),
        key_tokens=TokenAxis([f"k{i}" for i in range(TK)]),
    )
    return vm.head_map(result, vm.Selection(mode="head")), m[0, 0].copy()


@pytest.fixture
def widget(qtbot, monkeypatch):
    return shown_heatmap(qtbot, monkeypatch, SCREEN)  # 600 x 900 positions are "long"


def _pixels(w: HeatmapWidget) -> tuple[float, float]:
    """The view's device pixels, at most the (shrunk) screen's."""
    ratio = w.plot.devicePixelRatioF()
    return min(w.vb.width() * ratio, SCREEN), min(w.vb.height() * ratio, SCREEN)


def _zoom(w: HeatmapWidget, qtbot, k0: float, k1: float, q0: float, q1: float) -> None:
    with qtbot.waitSignal(w.repooled, timeout=3000):
        w.vb.setRange(QRectF(k0, q0, k1 - k0, q1 - q0), padding=0)


def _edges(lo: float, hi: float, f: int, n: int) -> tuple[int, int]:
    """The region along one axis, by hand: the margin each side, out to the runs' grid, within the map."""
    pad = MARGIN * (hi - lo)
    start = max(0, math.floor(lo - pad)) // f * f
    return start, min(n, math.ceil(min(n, math.ceil(hi + pad)) / f) * f)


def _drawn_rect(w: HeatmapWidget) -> tuple[float, float, float, float]:
    r = w.image.mapRectToParent(w.image.boundingRect())
    return r.left(), r.top(), r.width(), r.height()


def test_zooming_in_draws_the_visible_region_at_one_position_a_cell(widget, qtbot):
    mv, m = _map()
    widget.set_map(mv)
    assert "max of 3 × 5 positions a cell" in widget.colorbar.axis.labelText  # whole map: 600 / 200, 900 / 200
    _zoom(widget, qtbot, 300, 400, 100, 180)  # 100 x 80 positions over 200 pixels: each its own cell
    (q0, q1), (k0, k1) = _edges(100, 180, 1, TQ), _edges(300, 400, 1, TK)
    assert (q0, q1, k0, k1) == (90, 190, 287, 413)
    np.testing.assert_array_equal(widget.image.image, m[q0:q1, k0:k1])
    assert _drawn_rect(widget) == (k0, q0, k1 - k0, q1 - q0)
    assert "positions a cell" not in widget.colorbar.axis.labelText


@pytest.mark.parametrize("log", [False, True])
def test_zooming_part_way_draws_the_region_pooled_to_the_views_pixels(widget, qtbot, log):
    mv, m = _map()
    widget.set_map(mv, log=log)
    _zoom(widget, qtbot, 250, 650, 200, 520)  # 400 keys, 320 rows over 200 pixels: 2 x 2 positions a cell
    px_w, px_h = _pixels(widget)
    fq, fk = math.ceil(320 / px_h), math.ceil(400 / px_w)
    assert (fq, fk) == (2, 2)
    (q0, q1), (k0, k1) = _edges(200, 520, fq, TQ), _edges(250, 650, fk, TK)
    want = _by_hand(m[q0:q1, k0:k1], fq, fk)
    lo, _ = widget.colorbar.levels()
    want = np.log10(np.maximum(want, 10.0**lo)) if log else want
    np.testing.assert_allclose(widget.image.image, want, rtol=1e-6)
    assert _drawn_rect(widget) == (k0, q0, want.shape[1] * fk, want.shape[0] * fq)
    assert "max of 2 × 2 positions a cell" in widget.colorbar.axis.labelText


def test_the_hover_of_a_zoomed_map_names_the_real_position_and_its_own_weight(widget, qtbot):
    mv, m = _map()
    widget.set_map(mv)
    _zoom(widget, qtbot, 250, 650, 200, 520)
    for r, c in ((300, 300), (303, 300), (301, 402)):
        assert widget.cell_at_scene(widget.scene_pos_of(r, c)) == (r, c)
        widget.set_hover(r, c)
        text = widget.hover_label.text()
        assert f"“q{r}” ({r})" in text and text.endswith(f"({c}): {m[r, c]:.4f}")


def test_a_small_pan_inside_the_drawn_margin_pools_nothing_and_a_longer_one_pools_again(widget, qtbot):
    mv, m = _map()
    widget.set_map(mv)
    _zoom(widget, qtbot, 300, 400, 100, 180)
    drawn = widget.region
    widget.vb.setRange(QRectF(305, 104, 100, 80), padding=0)  # 5 and 4 positions: inside the margin
    qtbot.waitUntil(lambda: not widget._repool_timer.isActive())  # the debounce ran
    assert widget.region is drawn
    _zoom(widget, qtbot, 500, 600, 100, 180)  # 200 positions on: beyond it
    k0, k1 = _edges(500, 600, 1, TK)
    np.testing.assert_array_equal(widget.image.image, m[90:190, k0:k1])


def test_a_resized_view_is_pooled_to_its_new_pixels(widget, qtbot):
    mv, m = _map()
    widget.set_map(mv)
    with qtbot.waitSignal(widget.repooled, timeout=3000):
        widget.resize(200, 200)  # a view fewer pixels tall than the screen's 200: coarser runs down the rows
    px_w, px_h = _pixels(widget)
    assert px_h < SCREEN
    fq, fk = math.ceil(TQ / px_h), math.ceil(TK / px_w)
    assert fq > 3
    np.testing.assert_array_equal(widget.image.image, _by_hand(m, fq, fk))
    assert f"max of {fq} × {fk} positions a cell" in widget.colorbar.axis.labelText


def test_another_head_while_zoomed_is_drawn_at_once_at_the_zoomed_runs(widget, qtbot):
    mv, m = _map()
    widget.set_map(mv)
    _zoom(widget, qtbot, 300, 400, 100, 180)
    other = vm.MapView(**{**mv.__dict__, "matrix": m[::-1, ::-1].copy()})
    with qtbot.waitSignal(widget.repooled, timeout=1000):  # drawn within set_map, no wait for the debounce
        widget.set_map(other, reset_view=False)
    np.testing.assert_array_equal(widget.image.image, m[::-1, ::-1][90:190, 287:413])


def test_a_map_no_longer_than_the_screen_is_never_pooled_however_it_is_zoomed(widget, qtbot):
    mv, m = _map()
    small = vm.MapView(**{**mv.__dict__, "matrix": m[:150, :180].copy()})
    widget.set_map(small)
    np.testing.assert_array_equal(widget.image.image, m[:150, :180])
    widget.vb.setRange(QRectF(10, 10, 30, 30), padding=0)
    qtbot.waitUntil(lambda: not widget._repool_timer.isActive())
    np.testing.assert_array_equal(widget.image.image, m[:150, :180])
    assert widget.region is None


def test_a_mouse_wheel_zoom_is_pooled_once_when_it_settles_at_one_position_a_cell(widget, qtbot):
    mv, m = _map()
    widget.set_map(mv)
    pooled = []
    widget.repooled.connect(lambda: pooled.append(widget.region))
    viewport = widget.plot.viewport()
    at = widget.plot.mapFromScene(widget.scene_pos_of(300, 450))
    with qtbot.waitSignal(widget.repooled, timeout=3000):
        for _ in range(10):  # ten wheel notches in one go, as a turn of the wheel sends them
            notch = QWheelEvent(
                QPointF(at),
                QPointF(viewport.mapToGlobal(at)),
                QPoint(0, 0),
                QPoint(0, 120),
                Qt.MouseButton.NoButton,
                Qt.KeyboardModifier.NoModifier,
                Qt.ScrollPhase.NoScrollPhase,
                False,
            )
            QApplication.sendEvent(viewport, notch)
    qtbot.waitUntil(lambda: not widget._repool_timer.isActive())
    assert len(pooled) == 1  # the range moved ten times: pooled once, after it settled
    (x0, x1), (y0, y1) = widget.vb.viewRange()
    assert x1 - x0 < 100 and x0 < 450 < x1 and y0 < 300 < y1  # zoomed in about the pointer
    (q0, q1), (k0, k1) = _edges(y0, y1, 1, TQ), _edges(x0, x1, 1, TK)
    np.testing.assert_array_equal(widget.image.image, m[q0:q1, k0:k1])
    assert "positions a cell" not in widget.colorbar.axis.labelText
