"""A dual encoder (SigLIP whole) in the window: the text field is open beside the image, a typed text runs the text
tower (its block labelled with the words), and SigLIP's pooling head is a block of its own."""

from __future__ import annotations

from pathlib import Path

import pytest
from gui_helpers import open_and_wait, run_and_wait

pytest.importorskip("torch")
pytest.importorskip("transformers")

import dual_cache  # (the export, once per machine)
import hf_models

IMAGE = Path(__file__).resolve().parents[2] / "resources" / "samples" / "captioning.png"


def test_siglip_takes_an_image_and_a_text(qtbot, real_window, tmp_path):
    path = dual_cache.export_dual("siglip", "model", tmp_path)
    hf_models.word_tokenizer(99, bert_style=False).save_pretrained(str(tmp_path))
    w = real_window
    open_and_wait(qtbot, w, path, image=str(IMAGE), text="a cat on a mat")
    assert w.inputs.text.isEnabled() and w.inputs.image.isEnabled()
    run_and_wait(qtbot, w, text="the dog ran")
    blocks = w.session.result.blocks()
    assert [(b.stack, b.kind) for b in blocks] == [("encoder", "self"), ("encoder", "pooling"), ("encoder", "self")]
    assert blocks[2].key_axis.labels == ["the", "dog", "ran"]
    assert blocks[1].head(0, 0).shape == (1, 16)
