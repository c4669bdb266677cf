"""What the screen draws is what the figure exports: for every view and a grid of settings on encoder,
decoder, encoder-decoder, vision and captioning results, the numbers and labels read back from the
pyqtgraph items equal the ones read back from the matplotlib figure of "File ▸ Export view"."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from fakes import FakeModel, softmax_maps
from screen_figure import check_grid, check_image, check_map, figure, views_for

from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis


def decoder_result(batch: int = 1) -> AttentionResult:
    """A GPT-like result: causal self-attention over a prompt and the words generated from it."""
    rng = np.random.default_rng(7)
    prompt, gen = ["<|bos|>", "Blessed", "are"], ["the", "pure", "in", "heart"]
    labels = prompt + gen[:-1]  # the last generated word is not fed back
    t = len(labels)
    maps = [DenseMap(np.concatenate([softmax_maps(rng, 3, t, t, causal=True) for _ in range(batch)])) for _ in range(2)]
    sites = [SiteInfo("decoder", "self", i, 3, f"/h.{i}/attn/Softmax", "softmax") for i in range(2)]
    axis = TokenAxis(labels, [True] + [False] * (t - 1))
    return AttentionResult(maps, sites, tokens=axis, generated=gen, prompt_len=len(prompt), info={"model": "gpt"})


def fake(kind: str, **kw) -> AttentionResult:
    return FakeModel(f"{kind}.onnx", kind=kind, layers=2, heads=3).analyze(**kw)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    from PIL import Image

    img = tmp_path_factory.mktemp("img") / "square.png"
    a = np.zeros((32, 32, 3), np.uint8)
    a[8:24, 8:24] = (220, 30, 30)
    Image.fromarray(a).save(img)
    return {
        "encoder": fake("encoder", text="the cat sat on the mat"),
        "decoder": decoder_result(),
        "encoder-decoder": fake("encoder-decoder", text="das Haus ist klein", generate=4),
        "vision": fake("vision", image=str(img)),
        "captioning": fake("vision-decoder", image=str(img), generate=3),
    }


@pytest.mark.parametrize("model", ["encoder", "decoder", "encoder-decoder", "vision", "captioning"])
def test_screen_and_figure_draw_the_same(qtbot, window, results, model):
    w = window
    result = results[model]
    checked = check_grid(w, result)
    views = views_for(w)
    assert "head" in views and "overview" in views and "links" in views
    assert ("alignment" in views) == (model in ("encoder-decoder", "captioning"))
    assert ("image" in views) == (model in ("vision", "captioning"))
    assert checked >= 12


def test_batch_row_is_the_same_on_screen_and_in_the_figure(qtbot, window):
    w = window
    result = decoder_result(batch=2)
    w._show_result(result)
    w.session.select(batch=1, mode="head", layer=1, head=1)
    w.select_view("head")
    np.testing.assert_array_equal(w.head_map.heatmap.mv.matrix, result.maps[1].array()[1, 1])
    check_map(w.head_map.heatmap, figure(w, w.head_map))


def test_batch_row_control_switches_rows_and_their_tokens(qtbot, window):
    """A padded batch: the batch-row control (enabled only for batches) shows each row's own maps and tokens."""
    from attnviz.core.attention import TokenAxis
    from attnviz.core.rows import RowAxes, set_row_axes

    w = window
    result = decoder_result(batch=2)
    t = result.maps[0].shape[-1]
    set_row_axes(
        result,
        [RowAxes(TokenAxis([f"a{i}" for i in range(t)]), None), RowAxes(TokenAxis([f"b{i}" for i in range(t)]), None)],
    )
    w._show_result(result)
    w.select_view("head")
    w.session.select(mode="head", layer=0, head=0)
    assert w.controls.batch.isEnabled() and w.controls.batch.maximum() == 1
    w.controls.batch.setValue(1)
    assert w.session.sel.batch == 1 and w.session.blocks[0].batch == 1
    np.testing.assert_array_equal(w.head_map.heatmap.mv.matrix, result.maps[0].array()[1, 0])
    assert w.head_map.heatmap.mv.q_labels[0] == "b0"
    w._show_result(decoder_result(batch=1))
    assert not w.controls.batch.isEnabled()


@pytest.mark.parametrize("model", ["vision", "captioning"])
def test_image_base_choice_is_on_screen_and_in_the_export(qtbot, window, results, model):
    """The Image regions choice (grey / colour / heat only) lives in the selection: the screen's base pixels are
    the image's own bytes (colour), one value per channel (grey) or hidden under opaque heat (none), and the
    exported figure draws the same base and overlay."""
    w = window
    w._show_result(results[model])
    w.select_view("image")
    v = w.image_regions
    img = np.asarray(results[model].image)[..., :3].astype(np.float32)
    assert [v.base_box.itemData(i) for i in range(v.base_box.count())] == ["grey", "colour", "none"]
    for name in ("colour", "none", "grey"):
        v.base_box.setCurrentIndex(v.base_box.findData(name))
        assert w.session.sel.image_base == name
        under = v.image_item.image.astype(np.float32)
        alpha = v.overlay_item.image[..., 3]
        if name == "colour":
            np.testing.assert_array_equal(under, img)  # the red square stays red on screen
        elif name == "grey":
            assert np.array_equal(under[..., 0], under[..., 1]) and not np.array_equal(under, img)
        else:
            assert (alpha == 255).all()  # nothing of the image shows through
        check_image(w, figure(w, v))
        if v.strip:  # captioning: the strip's thumbnails are drawn on the same base
            assert v._strip_key[1].image_base == name
