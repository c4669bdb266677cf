"""`attnviz open --text a --text b` on a model that takes one text: the window joined the texts into its one-line box
("a; b") and ran it, so the user read a tokenizer's refusal of a word of the join ("unknown token '2;'"), where
`extract` names the problem.  Now the window says extract's line and runs nothing."""

from __future__ import annotations

import pytest

pytest.importorskip("onnxruntime")

from gui_helpers import demo

from attnviz.cli import main


def test_several_texts_for_a_one_text_model_are_extracts_line_in_the_window(qtbot, real_window, tmp_path, capsys):
    w = real_window
    with qtbot.waitSignal(w.error_shown, timeout=60000) as shown:
        w.open_path(demo("sequence-classification"), text=["1 2", "3 4"])
    assert w.session.result is None  # nothing ran
    assert (
        main(
            [
                "extract",
                str(demo("sequence-classification")),
                "--text",
                "1 2",
                "--text",
                "3 4",
                "--out",
                str(tmp_path / "m.npz"),
            ]
        )
        == 2
    )
    line = capsys.readouterr().err.strip().removeprefix("attnviz: error: ")
    said = str(shown.args[0])
    # the same words, the model named as each names it (the window: its name, extract: its file)
    assert said == line.replace("sequence-classification.onnx", "sequence-classification"), (said, line)
    assert not (tmp_path / "m.npz").exists()
