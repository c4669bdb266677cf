"""A dual encoder in the window with several candidate texts (zero-shot): the text box takes them between ';', the
Run section lists each text's score (the one shown marked), the row box is the text box: switching it switches the
text tower's maps, while the image tower's are the same for every text (its tooltip says so)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gui_helpers import open_and_wait

pytest.importorskip("torch")
pytest.importorskip("transformers")

import dual_cache  # (the export, once per machine)
import hf_models

IMAGE = Path(__file__).resolve().parents[2] / "resources" / "samples" / "captioning.png"
TEXTS = ["the cat sat on the mat", "a dog ran", "red image"]


def test_siglip_scores_each_candidate_text(qtbot, real_window, tmp_path):
    from attnviz.core.text_scores import TextScores
    from attnviz.runtime import open_model

    path = dual_cache.export_dual("siglip", "model", tmp_path)
    hf_models.word_tokenizer(99, bert_style=False).save_pretrained(str(tmp_path))
    w = real_window
    open_and_wait(qtbot, w, path, image=str(IMAGE), text="\n".join(TEXTS))
    assert w.inputs.request().texts == tuple(TEXTS)
    r = w.session.result
    assert r.batch_size == 3
    # the scores are the engine's on the same input (tests/runtime/test_dual_scores.py checks those against
    # transformers): one line a text, in order, the row shown marked
    want = TextScores.from_info(open_model(path, provider="cpu").analyze(image=str(IMAGE), text=TEXTS).info)
    assert want is not None
    lines = w.sidebar.values("Run")["scores"].splitlines()
    assert lines == want.lines(0) and "◀ shown" in lines[0]
    for i, t in enumerate(TEXTS):
        assert lines[i].startswith(f"text {i}  {want.scores[i]:.3f}  {t}")
    assert w.sidebar.values("Run")["scored by"].startswith("SigLIP's sigmoid")
    assert w.sidebar.values("Model")["kind"] == "dual encoder (image tower + text tower)"
    ctl = w.controls
    assert ctl.labels["batch row"].text() == "text" and "image tower" in ctl.batch.toolTip()
    text_block = len(w.session.blocks) - 1
    assert w.session.blocks[text_block].key_axis.labels[:6] == TEXTS[0].split()
    image_map = w.session.blocks[0].head(0, 0)
    ctl.batch.setValue(1)  # the second text: its own words, the image tower's maps unchanged
    assert w.session.sel.batch == 1
    axis = w.session.blocks[text_block].key_axis
    assert [t for t, p in zip(axis.labels, axis.pad or [False] * len(axis)) if not p] == TEXTS[1].split()
    np.testing.assert_array_equal(w.session.blocks[0].head(0, 0), image_map)
    assert "◀ shown" in w.sidebar.values("Run")["scores"].splitlines()[1]
    # the image ran once (its rows are one row of the map held: runtime/dual_towers.py), so nothing says it ran
    # once per text, as the Run section and the text box's tooltip did
    held = r.maps[0]
    assert held.held.shape[0] == 1 and held.rows == [0] * len(TEXTS)
    said = w.sidebar.values("Run")["image tower"] + ctl.batch.toolTip()
    assert "per text" not in said and "same for every text" in w.sidebar.values("Run")["image tower"]


def test_one_text_is_one_row(qtbot, real_window, tmp_path):
    """One text is what it always was: one row, a batch-row box with nothing to switch, and its score."""
    path = dual_cache.export_dual("clip", "model", tmp_path)
    hf_models.word_tokenizer(99, bert_style=False).save_pretrained(str(tmp_path))
    w = real_window
    open_and_wait(qtbot, w, path, image=str(IMAGE), text="the cat sat")
    assert w.inputs.request().texts is None and w.session.result.batch_size == 1
    assert w.controls.labels["batch row"].text() == "batch row"
    assert w.sidebar.values("Run")["scores"] == "text 0  1.000  the cat sat"  # CLIP: a softmax over one text


def test_open_takes_text_again_for_each_candidate(qtbot):
    """``attnviz open MODEL --image I --text a --text b``: the texts box holds them one a line, and the request is
    those texts (a ';' inside one stays in it); a text typed with line breaks is one text a line."""
    from types import SimpleNamespace

    from attnviz.cli import build_parser
    from attnviz.gui.command import input_values
    from attnviz.gui.widgets.input_panel import InputPanel

    args = build_parser().parse_args(
        ["open", "m.onnx", "--image", "i.png", "--text", "a cat; a mat", "--text", "a dog"]
    )
    values = input_values(args)
    assert values["text"] == ["a cat; a mat", "a dog"]
    panel = InputPanel()
    qtbot.addWidget(panel)
    dual = SimpleNamespace(kind="vision", roles={"input_ids": "tokens", "pixel_values": "image"}, path=None)
    panel.configure_for(dual)
    panel.set_values(text=values["text"], image="i.png")
    assert panel.texts.toPlainText() == "a cat; a mat\na dog"
    assert panel.request().texts == ("a cat; a mat", "a dog")
    panel.texts.setPlainText("  a red car \n\n a blue bus;  \n")  # blank lines and the lines' ends dropped
    assert panel.request().texts == ("a red car", "a blue bus;")
    panel.texts.setPlainText("one text; not split")
    assert panel.request().text == "one text; not split" and panel.request().texts is None
    one = input_values(build_parser().parse_args(["open", "m.onnx", "--text", "a cat; not split here"]))
    assert one["text"] == "a cat; not split here"
