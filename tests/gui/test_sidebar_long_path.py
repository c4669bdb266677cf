"""A model's file path longer than the Model sidebar's value column wraps at its slashes and underscores, every line
inside the column: the folder and the file of a path such as .../hf-minilm_legacy_eager_17-74e3d0457dcc/
minilm_legacy_eager_17.onnx were both drawn as "minilm_legacy_eager_17…" (Qt wraps at spaces only and elides the
rest), so the file's name could not be read."""

from __future__ import annotations

import shutil
from pathlib import Path

from gui_helpers import open_and_wait
from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QFontMetrics

DEMO = Path(__file__).resolve().parents[2] / "models" / "sequence-classification.onnx"


def test_a_long_path_wraps_inside_the_value_column(qtbot, real_window, tmp_path):
    folder = tmp_path / "hf-minilm_legacy_eager_17-74e3d0457dcc"
    folder.mkdir()
    path = folder / "minilm_legacy_eager_17.onnx"
    shutil.copy(DEMO, path)
    w = real_window
    w.resize(1400, 900)
    open_and_wait(qtbot, w, path)
    tree = w.sidebar
    assert tree.values("Model")["file"] == str(path)  # the whole path, as it is
    item = next(tree.section("Model").child(i) for i in range(4) if tree.section("Model").child(i).text(0) == "file")
    column = tree.header().sectionSize(1)
    fm = QFontMetrics(tree.font())
    box = fm.boundingRect(QRect(0, 0, column - 8, 1 << 20), Qt.TextFlag.TextWordWrap, item.text(1))
    assert box.width() <= column - 8, (box.width(), column)  # no line wider than the column: nothing cut
    assert tree.visualItemRect(item).height() >= box.height()  # and the row is as tall as its lines
    assert item.toolTip(1) == str(path)


def test_a_long_input_name_wraps_inside_the_property_column(qtbot, real_window):
    """The translation demo's decoder_input_ids was drawn "decoder_input_…" in the 150-px property column."""
    w = real_window
    w.resize(1400, 900)
    open_and_wait(qtbot, w, DEMO.with_name("translation.onnx"), generate=2)
    tree = w.sidebar
    assert "decoder_input_ids" in tree.values("Inputs")  # the name as it is
    inputs = tree.section("Inputs")
    rows = [inputs.child(i) for i in range(inputs.childCount())]
    item = next(r for r in rows if r.text(0).replace("\u200b", "") == "decoder_input_ids")  # break marks aside
    room = tree.header().sectionSize(0) - 2 * tree.indentation() - 8
    box = QFontMetrics(tree.font()).boundingRect(QRect(0, 0, room, 1 << 20), Qt.TextFlag.TextWordWrap, item.text(0))
    assert box.width() <= room, (box.width(), room)
    assert tree.visualItemRect(item).height() >= box.height()
