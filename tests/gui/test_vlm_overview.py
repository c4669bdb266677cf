"""A vision–language model in the Overview: its vision tower reads as such ("vision self-attention", not a text
encoder's "encoder"), and Qwen2.5-VL's vision layers say which attend within windows and which over the whole
image -- the model's own ``fullatt_block_indexes`` (tests/qwen25vl_models.py: FULL), not a guess from the maps.
The exported figure labels its rows the same."""

from __future__ import annotations

import numpy as np
import pytest
from gui_helpers import open_and_wait

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
pytest.importorskip("transformers")

PROMPT = "<|vision_start|><|image_pad|><|vision_end|>describe the cat"


@pytest.fixture
def picture(tmp_path):
    from PIL import Image

    p = tmp_path / "cat.png"
    Image.fromarray((np.random.default_rng(3).random((64, 64, 3)) * 255).astype(np.uint8)).save(p)
    return p


def _texts(view) -> list[str]:
    return [t.textItem.toPlainText() for t in view._labels if hasattr(t, "textItem")]


def test_overview_marks_the_windowed_vision_layers(qtbot, real_window, qwen25vl_repo, picture):
    import qwen25vl_models as q5

    from attnviz.figures import FigureStyle, render_figure

    w = real_window
    open_and_wait(qtbot, w, qwen25vl_repo, text=PROMPT, image=str(picture))
    w.select_view("overview")
    texts = _texts(w.overview)
    rows = [f"L{i} {'full' if i in q5.FULL else 'win'}" for i in range(q5.DEPTH)]
    assert [t for t in texts if t.startswith("L") and " " in t] == rows  # the vision layers, in order
    assert [t for t in texts if t in ("L0", "L1")] == ["L0", "L1"]  # the decoder's layers attend over all keys
    title = next(t for t in texts if t.startswith("vision self-attention"))
    assert title.endswith(f"win: within {q5.WINDOW}-px windows")
    decoder = next(t for t in texts if t.startswith("decoder self-attention"))
    assert "win" not in decoder
    # the figure of the same block: the same row labels and the same words in its title
    w.session.select(block=0)
    fig = render_figure(w.session.result, *w.figure_selection(w.overview), FigureStyle(dpi=40))
    assert [t.get_text() for t in fig.texts if t.get_text().startswith("L")] == rows
    assert f"win: within {q5.WINDOW}-px windows" in fig.texts[-1].get_text().replace("\n", " · ")


def test_the_vision_block_reads_vision_in_the_block_lists(qtbot, real_window, qwen25vl_repo, picture):
    w = real_window
    open_and_wait(qtbot, w, qwen25vl_repo, text=PROMPT, image=str(picture))
    combo = w.controls.block
    assert [combo.itemText(i) for i in range(combo.count())] == [
        "vision self-attention (3×4)",
        "decoder self-attention (2×4)",
    ]
    assert w.sidebar.values("Run")["maps"].startswith("5 sites, vision self-attention 3×4, decoder self-attention")
