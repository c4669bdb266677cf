"""An input edited after a run: the progress bar stops saying "done" (the views still show the run's input, not
the edited one) and says Run shows it; edited back, or run, it says "done" again."""

from __future__ import annotations

from pathlib import Path

from gui_helpers import open_and_wait, run_and_wait
from PySide6.QtCore import Qt

EDITED = "input changed: press Run to see it"
MODELS = Path(__file__).resolve().parents[2] / "models"


def test_an_edit_after_a_run_is_said(qtbot, window, files):
    open_and_wait(qtbot, window, files["text.onnx"], text="the cat sat")
    bar = window.inputs.progress
    assert bar.format() == "done" and bar.value() == 100
    window.inputs.text.setFocus()
    qtbot.keyClicks(window.inputs.text, " down")
    assert bar.format() == EDITED and bar.value() == 0
    assert window.session.result.tokens.labels != window.inputs.text.text().split()  # the views: the old input
    window.inputs.text.setText("the cat sat")  # back to what ran
    assert bar.format() == "done" and bar.value() == 100
    window.inputs.max_tokens.setValue(2)
    assert bar.format() == EDITED
    run_and_wait(qtbot, window, text="the cat sat down")
    assert bar.format() == "done"
    qtbot.keyClick(window.inputs.text, Qt.Key.Key_Backspace)
    assert bar.format() == EDITED


def test_a_generating_model_is_done_after_its_run(qtbot, real_window):
    """A captioner fills nothing back into the fields: "done" stays after its generation."""
    w = real_window
    open_and_wait(qtbot, w, MODELS / "captioning.onnx")
    assert w.inputs.progress.format() == "done"
    w.inputs.generate.setValue(3)
    assert w.inputs.progress.format() == EDITED
