"""polish24: a query bar (Image regions' queries, Audio regions' words) is one row of buttons that scrolls
sideways; it showed a vertical scrollbar beside its horizontal one (a fixed 48 px left the row 6 px short).  Only the
scrollbar the row needs shows, and every button lies whole inside the visible area."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication

from attnviz.gui.widgets.query_buttons import QueryButtons


def _whole(bar: QueryButtons, b) -> bool:
    """The button's top and bottom inside the viewport (what the user sees of the row)."""
    top = b.mapTo(bar.viewport(), b.rect().topLeft()).y()
    return top >= 0 and top + b.height() <= bar.viewport().height()


@pytest.mark.parametrize("n, sideways", [(40, True), (3, False)])
def test_one_row_scrolls_sideways_only(qtbot, n, sideways):
    bar = QueryButtons()
    qtbot.addWidget(bar)
    bar.fill([f"word{i}" for i in range(n)], lambda i: None)
    bar.resize(400, bar.height())
    bar.show()
    qtbot.waitExposed(bar)
    QApplication.processEvents()  # the layout requests the fill posted: the scroll bars are set as they show
    assert bar.buttons[0].height() > 0
    assert not bar.verticalScrollBar().isVisible()
    assert bar.verticalScrollBar().maximum() == 0  # nothing of the row hidden above or below
    assert bar.horizontalScrollBar().isVisible() is sideways  # 40 words overflow 400 px; 3 do not
    assert all(_whole(bar, b) for b in bar.buttons)
    bar.check(1)
    assert all(_whole(bar, b) for b in bar.buttons)  # a bold (checked) label does not grow the row either


def test_image_regions_bar_in_the_window(qtbot, real_window):
    """The captioning demo's Image regions bar as the window shows it (the screenshot that showed both), in a
    window narrow enough that its eight words overflow the bar."""
    from gui_helpers import open_and_wait

    pytest.importorskip("onnxruntime")
    w = real_window
    w.resize(1100, 900)
    open_and_wait(qtbot, w, Path(__file__).resolve().parents[2] / "models" / "captioning.onnx")
    w.select_view("image")
    bar = w.image_regions.query_bar
    qtbot.waitUntil(lambda: len(bar.buttons) > 0)
    QApplication.processEvents()
    assert bar.horizontalScrollBar().isVisible()  # the case that showed both
    assert not bar.verticalScrollBar().isVisible()
    assert all(_whole(bar, b) for b in bar.buttons)
