"""What the screen draws is what the figure exports: for every view and a grid of settings on encoder,
decoder, encoder-decoder, vision and captioning results, the numbers and labels read back from the
pyqtgraph items equal the ones read back from the matplotlib figure of "File ▸ Export view"."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from fakes import FakeModel, softmax_maps

from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
from attnviz.figures import render_figure


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


# (name, selection changes): heads and aggregates, layer ranges, steps, filters, log scale
SETTINGS = [
    ("head", dict(mode="head", layer=1, head=2)),
    ("mean+log", dict(mode="mean", layer_lo=0, layer_hi=1, log=True)),
    ("max+hide", dict(mode="max", layer_lo=1, layer_hi=1, hide_special=True)),
    ("rollout+keep", dict(mode="rollout", keep=0.6)),
    ("head+step", dict(mode="head", layer=0, head=1, step=1)),
    ("hide+keep+log+step", dict(mode="head", layer=1, head=0, hide_special=True, keep=0.8, log=True, step=0)),
]
VIEWS = ("overview", "head", "links", "alignment", "image")


def _unescape(s: str) -> str:
    return s.replace("\\$", "$")


def _figure(w, view):
    spec = w.figure_spec(view)
    assert spec is not None
    return render_figure(w.session.result, replace(spec, dpi=40))


def _check_map(hm, fig):
    """A heatmap widget and a heatmap figure: same matrix, colour range, axis titles and tick labels."""
    ax = fig.axes[0]
    mv = hm.mv
    np.testing.assert_array_equal(np.asarray(ax.images[0].get_array()), mv.matrix)
    norm = ax.images[0].norm
    lo, hi = hm.colorbar.levels()
    if hm.log:
        np.testing.assert_allclose([np.log10(norm.vmin), np.log10(norm.vmax)], [lo, hi], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(hm.image.image, np.log10(np.maximum(mv.matrix, norm.vmin)), rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_allclose([norm.vmin, norm.vmax], [lo, hi], rtol=1e-6)
        np.testing.assert_array_equal(hm.image.image, mv.matrix)
    assert ax.get_xlabel() == mv.x_title == hm.plot.getPlotItem().getAxis("bottom").labelText
    assert ax.get_ylabel() == mv.y_title == hm.plot.getPlotItem().getAxis("left").labelText
    for axis, labels in ((ax.xaxis, hm.x_axis.labels), (ax.yaxis, hm.y_axis.labels)):
        ticks = [int(round(t)) for t in axis.get_majorticklocs()]
        texts = [_unescape(t.get_text()) for t in axis.get_majorticklabels()]
        assert texts == [labels[i] for i in ticks]
        assert ticks[0] == 0 and ticks[-1] == len(labels) - 1  # first and last always labelled


def _check_overview(w, fig):
    ov = w.overview
    bi = w.session.sel.block
    blk = w.session.blocks[bi]
    drawn = ov.thumbnail_maps()
    panels = [a for a in fig.axes if a.images]
    want = [drawn[(bi, li, h)] for li in range(blk.n_layers) for h in range(blk.heads_in(li))]
    assert len(panels) == len(want)
    norm = panels[0].images[0].norm
    for a, m in zip(panels, want):
        np.testing.assert_array_equal(np.asarray(a.images[0].get_array()), m)
    lo, hi = ov.levels
    top = np.log10(norm.vmax) if w.session.sel.log else norm.vmax
    assert top == pytest.approx(hi, rel=1e-5)
    for key, img in ov.thumbs.items():
        if key[0] == bi:
            np.testing.assert_allclose(img.image, ov.thumbs[key].image)


def _check_links(w, fig):
    from matplotlib.collections import LineCollection

    cv = w.links.canvas
    colls = [c for c in fig.axes[0].collections if isinstance(c, LineCollection)]
    fig_alpha = sorted(round(float(c[3]), 6) for coll in colls for c in coll.get_colors())
    from attnviz.core.view import link_alpha

    gui_alpha = sorted(round(link_alpha(wt), 6) for _, _, _, wt in cv.links)
    assert fig_alpha == pytest.approx(gui_alpha, abs=1e-6)
    texts = {_unescape(t.get_text()) for t in fig.axes[0].texts}
    assert cv.q_labels[0] in texts and cv.q_labels[-1] in texts and cv.k_labels[-1] in texts
    assert {t for t in texts if t in set(cv.q_labels + cv.k_labels)} <= set(cv.q_labels + cv.k_labels)
    fig_colours = sorted({tuple(np.round(c[:3], 4)) for coll in colls for c in coll.get_colors()})
    from matplotlib.colors import to_rgb

    gui_colours = sorted(
        {
            tuple(np.round(to_rgb(colour), 4))
            for li, (colour, _) in enumerate(cv.layers)
            if any(lk[0] == li for lk in cv.links)
        }
    )
    assert fig_colours == gui_colours


def _check_image(w, fig):
    from matplotlib import colormaps

    v = w.image_regions
    gui = v.overlay_item.image  # [H*k, W*k, 4] uint8
    ax = next(a for a in fig.axes if len(a.images) == 2)
    rgba = np.asarray(ax.images[1].get_array())  # [H, W, 4] float
    h, w_ = rgba.shape[:2]
    k = gui.shape[0] // h
    # the screen computes the heat k times finer; block means of a bilinear surface are its centre values
    gui_alpha = gui[..., 3].astype(np.float32).reshape(h, k, w_, k).mean(axis=(1, 3)) / 255.0
    np.testing.assert_allclose(gui_alpha, rgba[..., 3], atol=0.03)
    # the same colour map: the screen's colour at a pixel is matplotlib's colour for that heat
    heat = (gui[..., 3].astype(np.float32) / 255.0 - 0.2) / 0.7
    want = colormaps[fig.attnviz_spec.colormap](np.clip(heat, 0, 1))[..., :3] * 255
    np.testing.assert_allclose(gui[..., :3].astype(np.float32), want, atol=6)
    assert f"query {v.queries[v.query][0]}" in " ".join(t.get_text().replace("\n", " ") for t in fig.texts)


def _views_for(w):
    return [v for v in VIEWS if not w.views[w.VIEW_ALIASES[v]].reason()]


@pytest.mark.parametrize("model", ["encoder", "decoder", "encoder-decoder", "vision", "captioning"])
def test_screen_and_figure_draw_the_same(qtbot, window, results, model):
    w = window
    result = results[model]
    w._show_result(result)
    views = _views_for(w)
    assert "head" in views and "overview" in views and "links" in views
    assert ("alignment" in views) == (model in ("encoder-decoder", "captioning"))
    assert ("image" in views) == (model in ("vision", "captioning"))
    checked = 0
    for bi, blk in enumerate(w.session.blocks):
        for _name, changes in SETTINGS:
            if changes.get("step", -1) >= 0 and not result.generated:
                continue
            w.session.select(
                block=bi,
                **{
                    "layer_lo": 0,
                    "layer_hi": -1,
                    "step": -1,
                    "keep": 1.0,
                    "log": False,
                    "hide_special": False,
                    **changes,
                },
            )
            for view in views:
                w.select_view(view)
                widget = w.current_view()
                if widget.message:  # the view says why this combination is undefined (rollout on cross)
                    assert changes["mode"] == "rollout" and (blk.kind == "cross" or view == "alignment")
                    continue
                fig = _figure(w, widget)
                {
                    "head": lambda: _check_map(w.head_map.heatmap, fig),
                    "alignment": lambda: _check_map(w.alignment.heatmap, fig),
                    "overview": lambda: _check_overview(w, fig),
                    "links": lambda: _check_links(w, fig),
                    "image": lambda: _check_image(w, fig),
                }[view]()
                checked += 1
    assert checked >= 12


def test_batch_row_is_the_same_on_screen_and_in_the_figure(qtbot, window):
    w = window
    result = decoder_result(batch=2)
    w._show_result(result)
    w.session.select(batch=1, mode="head", layer=1, head=1)
    w.select_view("head")
    np.testing.assert_array_equal(w.head_map.heatmap.mv.matrix, result.maps[1].array()[1, 1])
    _check_map(w.head_map.heatmap, _figure(w, w.head_map))


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
    assert w.controls.batch.isEnabled() and w.controls.batch.maximum() == 1
    w.controls.batch.setValue(1)
    assert w.session.sel.batch == 1 and w.session.blocks[0].batch == 1
    np.testing.assert_array_equal(w.head_map.heatmap.mv.matrix, result.maps[0].array()[1, 0])
    assert w.head_map.heatmap.mv.q_labels[0] == "b0"
    w._show_result(decoder_result(batch=1))
    assert not w.controls.batch.isEnabled()
