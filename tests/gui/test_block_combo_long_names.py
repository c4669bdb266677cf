"""A long block name (a dual encoder's or VLM's: "... self-attention (image) (6×12)") in the left dock's block box:
the closed box shows it elided in the middle (both ends still say which block), its tooltip the whole name, and
its popup is wide enough for the longest name (a plain QComboBox cut the closed box's name at its end; its popup
was already wide enough under Fusion, kept so by ElidedCombo.showPopup whatever the style)."""

from __future__ import annotations

from gui_helpers import open_and_wait


def test_the_block_box_elides_in_the_middle_and_its_popup_fits(qtbot, window, files):
    w = window
    open_and_wait(qtbot, w, files["text.onnx"])
    for b in w.session.blocks:  # what a tower's blocks are called (core.attention.Block.name)
        b.stack, b.tower = "vision_model.encoder", "image and its several tiles"
    w.controls.rebuild()
    box = w.controls.block
    name = w.session.blocks[0].name + " (6×12)"
    assert box.currentText() == name
    fm = box.fontMetrics()
    assert fm.horizontalAdvance(name) > box.width()  # the case at hand: the name does not fit the box

    shown = box.shown_text()
    head, _, tail = shown.partition("…")
    assert _ == "…" and head and tail
    assert name.startswith(head) and name.endswith(tail)
    assert tail.endswith("(6×12)")  # the end (which tower, its size) is kept, not cut off
    assert box.toolTip() == name
    assert box.width() <= w.left_dock.width()  # the long name did not widen the dock

    box.showPopup()
    popup = box.view()
    qtbot.waitUntil(popup.isVisible)
    try:
        assert popup.viewport().width() >= popup.fontMetrics().horizontalAdvance(name)
    finally:
        box.hidePopup()
