"""A status message longer than the room left of the device label ends in "…" before it (QStatusBar clipped it
mid-letter at the label, reading as text running under it); the bar's tooltip holds the whole message."""

from __future__ import annotations

from gui_helpers import open_and_wait
from PySide6.QtGui import QColor


def ink_right_edge(bar, label_x: int) -> int:
    """The rightmost column left of the label with a pixel unlike the bar's background (the message's ink)."""
    img = bar.grab().toImage()
    bg = QColor(img.pixel(1, 1)).lightness()
    for x in range(label_x - 1, -1, -1):
        for y in range(2, img.height() - 2):
            if abs(QColor(img.pixel(x, y)).lightness() - bg) > 40:
                return x
    return -1


def test_a_long_message_is_elided_before_the_device_label(qtbot, window, files):
    w = window
    open_and_wait(qtbot, w, files["text.onnx"])
    bar, label = w.statusBar(), w.status_device
    assert label.text().startswith("device:")
    long = " · ".join(f"head {i} off: output changed by {i / 7:.3f}" for i in range(40))
    bar.showMessage(long)
    qtbot.waitUntil(lambda: bar.currentMessage() == long)
    bar.repaint()
    shown = bar.shown_message()
    assert shown.endswith("…") and long.startswith(shown[:-1])
    drawn_right = bar.message_rect().left() + bar.fontMetrics().horizontalAdvance(shown)
    assert drawn_right < label.geometry().left()
    # the pixels agree: the ink stops where the elided text ends, a gap before the label (not clipped at it)
    edge = ink_right_edge(bar, label.geometry().left())
    assert drawn_right - 4 <= edge <= drawn_right + 1
    assert edge < label.geometry().left() - 3
    assert bar.toolTip() == long
    assert bar.currentMessage() == long  # only the drawing is shortened


def test_a_short_message_is_drawn_whole(qtbot, window, files):
    w = window
    open_and_wait(qtbot, w, files["text.onnx"])
    bar = w.statusBar()
    bar.showMessage("Running…")
    assert bar.shown_message() == "Running…"
    assert bar.toolTip() == "Running…"
