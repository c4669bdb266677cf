"""Issue 22 in the window: a Hub VLM repository opens at the variant `attnviz open --variant` names, and Image
regions shows a word's attention over an Idefics3 image's tiles, the screen's map the view model's."""

from __future__ import annotations

import numpy as np
import pytest
from gui_helpers import open_and_wait

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
pytest.importorskip("transformers")

PROMPT = "<s> <image> a photo of the cat"


@pytest.fixture
def picture(tmp_path):
    from PIL import Image

    p = tmp_path / "wide.png"
    Image.fromarray((np.random.default_rng(3).random((40, 100, 3)) * 255).astype(np.uint8)).save(p)
    return p


def test_the_window_opens_the_variant_asked_for(qtbot, real_window, llava_variants_repo, picture):
    w = real_window
    w.variant = "int8"  # what `attnviz open REPO --variant int8` sets (gui/command.py)
    open_and_wait(qtbot, w, llava_variants_repo, text=PROMPT, image=str(picture))
    assert w.session.model.layout.variant == "int8"
    assert w.session.model.layout.decoder.name == "decoder_model_merged_int8.onnx"
    assert w.sidebar.values("Metadata") == {"variant": "int8", "variants": "full, int8, uint8"}


def test_image_regions_draw_a_word_over_the_tiles(qtbot, real_window, idefics3_repo, picture):
    from attnviz.core import view as vm

    w = real_window
    open_and_wait(qtbot, w, idefics3_repo, text=PROMPT, image=str(picture))
    w.select_view("image")
    view = w.image_regions
    bi, grid, kind = view.source()
    assert kind == "self" and grid.columns is not None and (grid.rows, grid.cols) == (3, 6)  # 1 x 2 tiles of 3 x 3
    # each row named by the word it produced (words24): the prompt's next token, "(next)" for the last row
    assert [q for q, _ in view.queries] == "photo of the cat (next)".split()
    view.set_query(4)  # the row reading "cat"
    want = vm.overlay_view(w.session.result, w.session.sel.with_(block=bi, query=view.queries[4][1]))
    assert np.array_equal(view.patch_map, want.patch)
