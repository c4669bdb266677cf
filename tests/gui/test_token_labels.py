"""Token labels on the head map: all of them when they fit side by side or upright, else first + last + an even
stride that never overlaps (the issue's "the source axis showed 7 of 12 labels although they would fit")."""

from __future__ import annotations

import numpy as np
from fakes import FakeModel
from PySide6.QtGui import QFont, QFontMetrics


def _show(qtbot, w, n_words: int, word: str = "paragraph"):
    result = FakeModel("long.onnx", kind="encoder", layers=1, heads=2).analyze(
        text=" ".join(f"{word}{i}" for i in range(n_words))
    )
    w._show_result(result)
    w.select_view("head")
    w.session.select(mode="head", layer=0, head=0)
    hm = w.head_map.heatmap
    qtbot.waitUntil(lambda: hm.x_axis.geometry().width() > 100)
    return hm


def _shown(axis, vb, which: int) -> list[int]:
    lo, hi = vb.viewRange()[which]
    size = axis.geometry().width() if which == 0 else axis.geometry().height()
    return axis.shown(lo, hi, size)


def test_labels_that_do_not_fit_side_by_side_stand_upright_and_all_show(qtbot, window):
    hm = _show(qtbot, window, 24)  # 26 tokens with [CLS]/[SEP], ~80 px each: ~2000 px side by side
    n = len(hm.x_axis.labels)
    assert n == 26
    assert _shown(hm.x_axis, hm.vb, 0) == list(range(n))
    assert hm.x_axis.rotated
    # the axis grew to hold the longest upright label, and the picture has ink down there
    longest = max(QFontMetrics(QFont()).horizontalAdvance(s) for s in hm.x_axis.labels)
    qtbot.waitUntil(lambda: hm.x_axis.geometry().height() >= longest)
    rect = hm.plot.mapFromScene(hm.x_axis.sceneBoundingRect()).boundingRect()
    img = hm.plot.grab(rect).toImage()
    band = range(int(longest * 0.6), int(longest * 0.9))  # below where a side-by-side label would end
    ink = sum(img.pixelColor(x, y).lightness() < 128 for x in range(img.width()) for y in band)
    assert ink > 100


def test_few_short_labels_stay_side_by_side(qtbot, window):
    hm = _show(qtbot, window, 4, word="a")
    assert _shown(hm.x_axis, hm.vb, 0) == list(range(len(hm.x_axis.labels)))
    assert not hm.x_axis.rotated


def test_thinned_labels_keep_first_last_and_never_overlap(qtbot, window):
    line = QFontMetrics(QFont()).height()
    for n_words in range(290, 300):  # lengths whose last stride label falls at every distance from the last one
        hm = _show(qtbot, window, n_words)
        for which, axis in ((0, hm.x_axis), (1, hm.y_axis)):
            idx = _shown(axis, hm.vb, which)
            n = len(axis.labels)
            assert idx[0] == 0 and idx[-1] == n - 1 and len(idx) < n
            size = axis.geometry().width() if which == 0 else axis.geometry().height()
            gaps = np.diff(idx) * size / n
            assert gaps.min() >= line, (n, which, gaps.min(), line)  # upright or stacked: one line height each
