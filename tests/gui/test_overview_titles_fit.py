"""The Overview's block titles fit their box: at a 1000-px window "encoder self-attention  (3 layers × 4 heads)"
ran past the view's right edge, under the colour bar, cut mid-word.  A title now starts over the grid's left edge,
further left where it needs the room, and one wider than the whole view is cut with "…", its tooltip the title
whole.  Measured as drawn: each title's text item (its laid-out document, margins included) against the view
box, in the scene's pixels."""

from __future__ import annotations

import pyqtgraph as pg
import pytest
from gui_helpers import demo, open_and_wait
from PySide6.QtGui import QFontMetricsF


def _measured(ov):
    """Per block title: (its text's left and right edges in the scene, the view box's, shown text, whole text)."""
    box = ov.vb.sceneBoundingRect()
    out = []
    for title, _, full in ov._titles:
        drawn = title.textItem.mapToScene(title.textItem.boundingRect()).boundingRect()  # the text as laid out
        out.append((drawn.left(), drawn.right(), box.left(), box.right(), title.textItem.toPlainText(), full))
    return out


@pytest.mark.parametrize("size", [(1000, 650), (800, 600)])
def test_block_titles_fit_the_view(qtbot, real_window, size):
    w = real_window
    w.resize(*size)
    open_and_wait(qtbot, w, demo("translation"))
    w.select_view("overview")
    ov = w.overview
    qtbot.waitUntil(lambda: ov.vb.sceneBoundingRect().width() > 0 and len(ov._titles) == 3, timeout=10000)
    qtbot.wait(50)  # (the view's resize reaches the titles through its signals)
    got = _measured(ov)
    wholes = [g[5] for g in got]
    assert wholes == [f"{name}  (3 layers × 4 heads)" for name in
                      ("encoder self-attention", "decoder self-attention", "decoder cross-attention")]  # fmt: skip
    for left, right, box_left, box_right, text, full in got:
        assert box_left - 0.5 <= left and right <= box_right + 0.5, (size, text, left, right, box_left, box_right)
        assert text == full or (text.endswith("…") and full.startswith(text[:-1].rstrip()))
    title = ov._titles[0][0]
    if size == (1000, 650):  # room enough: each title whole (the first cut passed '3 layers × 4 hea…')
        assert [g[4] for g in got] == wholes
    else:  # too narrow for any: cut, and the tooltip says it whole
        assert all(g[4] != g[5] for g in got)
        assert title.textItem.toolTip() == wholes[0]
    # the whole title would not have fit where the grid starts (at 1000 px) or anywhere in the view (at 800):
    # the measurement is not vacuous
    grid_left = ov.vb.mapViewToScene(pg.Point(0, 0)).x()
    full_px = QFontMetricsF(title.textItem.font()).horizontalAdvance(wholes[2])
    assert grid_left + full_px > got[2][3]
    if size == (800, 600):
        assert got[2][2] + full_px > got[2][3]
