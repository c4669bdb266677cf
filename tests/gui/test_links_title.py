"""Token links names what it draws as the Head map's title does: the block, the layer range of an aggregate, the
heads overlaid (it said "layer 5 · mean over heads" for the mean over layers 2–3, and never the block)."""

from __future__ import annotations

from gui_helpers import open_and_wait


def test_links_info_names_block_layers_and_heads(qtbot, window, files):
    open_and_wait(qtbot, window, files["mt.onnx"])  # encoder-decoder: three blocks of 2 layers × 4 heads
    window.select_view("links")
    links = window.links
    s = window.session
    cross = next(i for i, b in enumerate(s.blocks) if b.kind == "cross")
    s.select(block=cross, mode="mean", layer=1, layer_lo=0, layer_hi=0)
    assert (
        links.info.text()
        == "decoder cross-attention · layer 0 · mean over heads. Hover a token to show only its links."
    )
    s.select(mode="head", layer=1, head=2)
    assert links.info.text().startswith("decoder cross-attention · layer 1 · head 2. ")
    links.head_boxes[0].setChecked(True)  # a second head overlaid
    assert links.info.text().startswith("decoder cross-attention · layer 1 · heads 0, 2. ")
