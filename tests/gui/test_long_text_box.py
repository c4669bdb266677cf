"""A long document in the text box: Qt's QLineEdit keeps at most 32,767 characters unless told otherwise, and cut a
longer text (pasted, or given as ``attnviz open --text``) without a word, so the window ran another text than the
one given.  The text here is 1,000 words of 40 characters (40,000 characters, about what 9,000 tokens of English
take): the run's tokens must be the text's own words, the last of them past the old cut."""

from __future__ import annotations

from gui_helpers import open_and_wait, run_and_wait
from PySide6.QtWidgets import QApplication

QT_DEFAULT_CAP = 32767


def _document() -> str:
    words = [f"w{i:04d}" + "x" * 34 for i in range(999)] + ["theend"]
    text = " ".join(words)
    assert len(text) > QT_DEFAULT_CAP + 5000  # past the old cap by far
    return text


def test_a_pasted_long_document_is_run_whole(qtbot, window, files):
    open_and_wait(qtbot, window, files["long.onnx"], text="short")
    text = _document()
    box = window.inputs.text
    box.clear()
    QApplication.clipboard().setText(text)
    box.paste()  # as a user pastes it
    assert box.text() == text
    run_and_wait(qtbot, window)
    labels = window.session.result.tokens.labels
    assert labels[1:-1] == text.split()  # [CLS] ... [SEP] around every word, "theend" last


def test_open_text_sets_the_whole_document(qtbot, window):
    text = _document()
    window.inputs.set_values(text=text, text_pair=text)  # what `attnviz open --text T` does
    assert window.inputs.values()["text"] == text
    assert window.inputs.text_pair.text() == text
