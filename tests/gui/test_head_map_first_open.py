"""A long map opened in the Head map is pooled once: the view's pixels the first pool plans for are those the view
keeps once its axes have drawn their labels.  (pyqtgraph sizes an axis for its labels only while painting them:
before session 20 the first paint stood the key labels upright, the view lost their band's height, and the whole
map was pooled a second time for the new size, ~0.4 s of CPU at 30,000 tokens.)

The map has 40,000 keys (the screen is taken to be 4,000 pixels, so the view's own size sets the runs): any change
of the view's width by more than ~1.5 % changes the keys' runs and so would pool the map again.  Its 100 rows have
long labels: their band, as wide as the longest label shown, is what the first paint took from the view's width."""

from __future__ import annotations

import math

import numpy as np
from gui_helpers import shown_heatmap
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QApplication

from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis

TQ, TK, SCREEN = 100, 40_000, 4_000


def _map() -> tuple[vm.MapView, np.ndarray]:
    m = np.random.default_rng(20).random((1, 1, TQ, TK), dtype=np.float32)
    site = SiteInfo("encoder", "cross", 0, 1, "softmax_0", "softmax")
    result = AttentionResult(
        [DenseMap(m)],
        [site],
        tokens=TokenAxis([f"a long query token {i}" for i in range(TQ)]),
        key_tokens=TokenAxis([f"k{i}" for i in range(TK)]),
    )
    return vm.head_map(result, vm.Selection(mode="head")), m[0, 0]


def _by_hand(m: np.ndarray, fq: int, fk: int) -> np.ndarray:
    """Max over blocks of fq x fk positions, a short last block padded with zeros."""
    pq, pk = math.ceil(m.shape[0] / fq) * fq, math.ceil(m.shape[1] / fk) * fk
    padded = np.zeros((pq, pk), m.dtype)
    padded[: m.shape[0], : m.shape[1]] = m
    return padded.reshape(pq // fq, fq, pk // fk, fk).max(axis=(1, 3))


def test_a_long_map_is_pooled_once_when_first_shown_at_the_views_settled_pixels(qtbot, monkeypatch):
    w = shown_heatmap(qtbot, monkeypatch, SCREEN)
    mv, m = _map()
    planned: list[tuple[float, float]] = []  # the view's pixels at each pool
    w.repooled.connect(lambda: planned.append((w.vb.width(), w.vb.height())))
    w.set_map(mv)
    w.plot.grab()  # paint: the axes draw their labels (and, before, only then learnt the room they take)
    QApplication.processEvents()  # the layout requests that posted
    qtbot.waitUntil(lambda: not w._repool_timer.isActive())  # a re-pool the resize asked for has run (or not)
    assert w.y_axis.width() > QFontMetrics(QFont()).horizontalAdvance("a long query token 1")  # the wide band
    fk = math.ceil(TK / (w.vb.width() * w.plot.devicePixelRatioF()))
    assert planned == [(w.vb.width(), w.vb.height())]  # once, for the size the view kept
    assert (w.region.fq, w.region.fk) == (1, fk)
    np.testing.assert_array_equal(w.image.image, _by_hand(m, 1, fk))
