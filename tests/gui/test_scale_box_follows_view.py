"""The colour-scale and log boxes are greyed exactly on the tabs where they move nothing.

Image regions (and Token links, Audio regions, Head stats) draw on scales of their own; the boxes stayed live there,
so the left panel said "fixed 0–1" beside a colour bar "stretched to this map" (audit25).  Independent check: each
tab is drawn under two settings of the boxes and its pixels compared — a greyed box must leave them equal, a live
one must change them."""

from __future__ import annotations

import numpy as np
from gui_helpers import open_and_wait


def _pixels(qtbot, w, view, **sel) -> np.ndarray:
    w.session.select(**sel)
    qtbot.wait(0)  # (a zero wait: lets queued paint events run; no timing stands in for a signal here)
    from PySide6.QtGui import QImage

    img = view.grab().toImage().convertToFormat(QImage.Format.Format_RGB32)
    return np.frombuffer(bytes(img.constBits()), np.uint8).reshape(img.height(), img.bytesPerLine()).copy()


def test_the_boxes_are_live_exactly_where_they_move_the_picture(qtbot, window, files):
    w = window
    open_and_wait(qtbot, w, files["cap.onnx"], image=str(files["image"]), generate=4)
    live = {}
    for i in range(w.tabs.count()):
        view = w.tabs.widget(i)
        w.tabs.setCurrentIndex(i)
        base = _pixels(qtbot, w, view, **{view.scale_field: "fixed"}, log=False)
        moved = _pixels(qtbot, w, view, **{view.scale_field: "map"}, log=True)
        changed = base.shape != moved.shape or not np.array_equal(base, moved)
        enabled = w.controls.scale.isEnabled() and w.controls.log.isEnabled()
        live[w.tabs.tabText(i)] = (enabled, changed)
        if not enabled:
            assert w.controls.scale.toolTip() == view.scale_note and w.controls.log.toolTip() == view.scale_note
        _pixels(qtbot, w, view, **{view.scale_field: "fixed"}, log=False)
    assert all(enabled == changed for enabled, changed in live.values()), live
    assert any(e for e, _ in live.values()) and not all(e for e, _ in live.values()), live  # both kinds seen
