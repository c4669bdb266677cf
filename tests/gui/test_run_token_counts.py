"""The Run sidebar counts a model that reads an image and writes words apart: the decoder's text tokens and the
image tokens, not the vision tower's patches as "tokens".  The counts come from transformers' own processor (the
Idefics3 prompt's ids) and from the maps' shapes (the captioner's encoder keys)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gui_helpers import open_and_wait, run_and_wait

pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "resources" / "samples" / "captioning.png"
PROMPT = "<s> <image> a photo of the cat"


def test_a_vlm_counts_its_text_and_image_tokens_apart(qtbot, real_window, idefics3_repo):
    pytest.importorskip("torch")
    import idefics3_models as im
    from PIL import Image

    w = real_window
    open_and_wait(qtbot, w, idefics3_repo, text=PROMPT, image=str(SAMPLE))
    enc = im.processor(idefics3_repo)(text=[PROMPT], images=[[Image.open(SAMPLE).convert("RGB")]], return_tensors="np")
    ids = enc["input_ids"][0]
    n_image = int((ids == im.IMAGE_TOKEN).sum())
    frames = enc["pixel_values"].shape[1]  # the tiles and the global image the vision tower sees
    assert n_image == frames * im.N_TILE == 5 * im.N_TILE  # 2 x 2 tiles and the global image
    run = w.sidebar.values("Run")
    assert "tokens" not in run
    assert run["text tokens"] == f"{len(ids) - n_image} in the decoder"
    side = 2 * im.SIDE
    patches = frames * (im.TILE // im.PATCH) ** 2
    assert run["image tokens"] == (
        f"{n_image} in the decoder (tiles {side}×{side} + global image {im.SIDE}×{im.SIDE}) · "
        f"{patches} tokens in the vision tower"
    )


def test_a_captioner_counts_its_words_and_the_encoders_patches(qtbot, real_window):
    model = ROOT / "models" / "captioning.onnx"
    if not model.exists():
        pytest.skip("the captioning demo is not in this checkout")
    w = real_window
    open_and_wait(qtbot, w, model, image=str(SAMPLE))
    run_and_wait(qtbot, w, text="a red square", generate=0)
    r = w.session.result
    cross = next(m for m, s in zip(r.maps, r.sites) if s.kind == "cross")
    _, _, words, patches = np.shape(cross.array())  # [B, H, decoder tokens, encoder keys]
    run = w.sidebar.values("Run")
    assert "tokens" not in run
    assert run["text tokens"] == f"{words} in the decoder" and words == 1 + 3  # the start token and three words
    g = r.patch_grid
    extra = f" + {g.offset} other" if g.offset else ""
    assert run["image tokens"] == f"{patches} from the encoder ({g.rows}×{g.cols}{extra} patches)"
    assert g.offset + g.n == patches


def test_a_text_model_keeps_one_tokens_row(qtbot, real_window, tmp_path):
    from onnx_builders import tiny_text_model

    w = real_window
    open_and_wait(qtbot, w, tiny_text_model(tmp_path / "model.onnx"), text="the cat sat")
    run = w.sidebar.values("Run")
    assert run["tokens"] == str(w.session.result.maps[0].shape[-1]) and "text tokens" not in run
