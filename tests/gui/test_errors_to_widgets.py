"""An error names the setting to fix (AttnvizError.param); the window turns it into the control to change,
where the CLI would name a flag."""

from __future__ import annotations

from gui_helpers import open_and_wait

from attnviz import AttnvizError


def test_an_error_about_the_image_marks_the_image_field(qtbot, window, files):
    open_and_wait(qtbot, window, files["text.onnx"])
    w = window
    w._on_error("run", w._latest["run"], AttnvizError("this model takes an image", param="image"))
    assert w.last_error == "this model takes an image"
    assert w.marked_widget is w.inputs.image and "d62728" in w.inputs.image.styleSheet()
    w.inputs.image.setText("x.png")  # the user fixes it: the frame goes
    assert w.inputs.image.styleSheet() == ""


def test_a_view_error_marks_the_aggregate_box(qtbot, window, files):
    open_and_wait(qtbot, window, files["mt.onnx"], text="the house is small", generate=3)
    w = window
    w._on_error("run", w._latest["run"], AttnvizError("rollout needs self-attention", param="aggregate"))
    assert w.marked_widget is w.controls.mode
