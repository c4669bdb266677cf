"""Every view renders to PDF, SVG and PNG; text stays text; sizes are what was asked."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
from _pdftext import pdf_text, svg_texts
from figure_data import CAPTION, SOURCE, TARGET_GEN, TEXT_TOKENS, encdec_result, text_result, vision_result
from PIL import Image

from attnviz.figures import FigureSpec, figure_bytes, render_spec, save_figure

# view -> (result factory, spec kwargs, words that must appear as text)
CASES = {
    "heatmap": (text_result, {}, ["cat", "mat", "$5", "[CLS]", "tiny-bert"]),
    "heatmap-cross": (encdec_result, {"block": "decoder cross", "head": 1}, ["Haus", "klein", "house"]),
    "overview": (text_result, {}, ["L0", "L1", "H2", "tiny-bert"]),
    "links": (text_result, {"layer": 0, "heads": [0, 1, 2]}, ["cat", "sat", "head 2"]),
    "alignment": (encdec_result, {}, ["Haus", "klein", "house", "small"]),
    "image": (vision_result, {"head": 0}, ["tiny-vit", "[CLS]"]),
    "strip": (lambda: vision_result(decoder=True), {}, CAPTION[:3]),
    "strip-text": (encdec_result, {"hide_special": True}, ["das", "Haus", "klein", "house", "small"]),
}


def _spec(case, **kw):
    factory, extra, _ = CASES[case]
    view = case.split("-")[0]
    return factory(), FigureSpec(view=view, **{**extra, **kw})


@pytest.mark.parametrize("case", list(CASES))
def test_view_renders_searchable_text_in_all_formats(case, tmp_path):
    result, spec = _spec(case, width="single", dpi=100)
    fig = render_spec(result, spec)
    words = CASES[case][2]
    for fmt in ("pdf", "svg", "png"):
        path = save_figure(fig, tmp_path / f"fig.{fmt}")
        data = path.read_bytes()
        assert len(data) > 1000
        if fmt == "pdf":
            assert data.startswith(b"%PDF")
            assert b"/FontFile2" in data and b"/Type3" not in data  # embedded TrueType (Type 42), not glyph procs
            texts = pdf_text(data)
        elif fmt == "svg":
            texts = svg_texts(data)
        else:
            continue
        joined = "\n".join(texts)
        for w in words:
            assert w in joined, f"{w!r} not searchable in the {fmt} of {case}: {texts}"


def test_heatmap_labels_every_token_on_both_axes():
    result, spec = _spec("heatmap", width="double", dpi=72)
    texts = svg_texts(figure_bytes(render_spec(result, spec), "svg"))
    for tok in set(TEXT_TOKENS):
        assert texts.count(tok) >= 2 * TEXT_TOKENS.count(tok), tok  # x and y axis


def test_alignment_rows_are_generated_words_and_columns_source():
    result = encdec_result()
    texts = svg_texts(figure_bytes(render_spec(result, FigureSpec(view="alignment", dpi=72)), "svg"))
    for w in SOURCE + TARGET_GEN:
        assert w in texts
    assert "generated" in texts and "source" in texts


def test_alignment_works_when_last_word_was_not_fed_back():
    result = encdec_result(full=False)  # decoder holds prompt + generated[:-1]
    texts = svg_texts(figure_bytes(render_spec(result, FigureSpec(view="alignment", dpi=72)), "svg"))
    assert all(w in texts for w in TARGET_GEN)


@pytest.mark.parametrize(
    "width,width_in,dpi,px", [("single", None, 200, 700), ("double", None, 100, 716), (None, 2.0, 150, 300)]
)
def test_png_has_the_asked_pixel_width(width, width_in, dpi, px):
    result, spec = _spec("heatmap", width=width, width_in=width_in, dpi=dpi)
    img = Image.open(io.BytesIO(figure_bytes(render_spec(result, spec), "png")))
    assert img.size[0] == px
    w_in, h_in = render_spec(result, spec).get_size_inches()
    assert img.size == (round(w_in * dpi), round(h_in * dpi))


@pytest.mark.parametrize("case", ["heatmap", "overview", "links", "image", "strip"])
def test_fixed_width_is_kept_by_every_view(case):
    result, spec = _spec(case, width_in=3.0, dpi=100)
    img = Image.open(io.BytesIO(figure_bytes(render_spec(result, spec), "png")))
    assert img.size[0] == 300


@pytest.mark.parametrize("fmt", ["png", "pdf", "svg"])
def test_same_figure_gives_the_same_bytes(fmt):
    a = figure_bytes(render_spec(*_spec("heatmap", dpi=80)), fmt)
    b = figure_bytes(render_spec(*_spec("heatmap", dpi=80)), fmt)
    assert a == b


def test_long_input_thins_labels_but_keeps_them_text():
    toks = [f"w{i}" for i in range(200)]
    result = text_result(n_layers=1, heads=1, tokens=toks)
    fig = render_spec(result, FigureSpec(width="single", dpi=72))
    texts = svg_texts(figure_bytes(fig, "svg"))
    said = [m.groups() for m in (re.fullmatch(r"(w\d+) ·(\d+)", t) for t in texts) if m]
    assert all(word == f"w{pos}" for word, pos in said)  # a thinned label says its position: token wN sits at N
    shown = [word for word, _ in said]
    assert 10 <= len(shown) < 200  # thinned on both axes
    assert "w0" in shown and "w199" in shown  # the first and the last token are always labelled
    # every k-th label with a regular step (a label less than a step from the last one makes way: no overlap)
    xs = sorted({int(t[1:]) for t in shown})
    steps = [b - a for a, b in zip(xs, xs[1:])]
    assert len(set(steps[:-1])) == 1 and steps[0] <= steps[-1] < 2 * steps[0]
    # sized to the content, labels would all fit
    fig = render_spec(text_result(n_layers=1, heads=1, tokens=toks[:60]), FigureSpec(dpi=72))
    shown = [t for t in svg_texts(figure_bytes(fig, "svg")) if re.fullmatch(r"w\d+", t)]
    assert len(shown) == 120


def test_hide_special_drops_special_tokens_and_renormalises():
    result = text_result()
    fig = render_spec(result, FigureSpec(hide_special=True, dpi=72))
    texts = svg_texts(figure_bytes(fig, "svg"))
    assert "[CLS]" not in texts and "[SEP]" not in texts and "cat" in texts
    ax = fig.axes[0]
    m = ax.images[0].get_array()
    assert m.shape == (7, 7)
    np.testing.assert_allclose(m.sum(-1), 1.0, atol=1e-5)


def test_tokens_are_cleaned_for_print():
    toks = ["<s>", "Ġhello", "Ġ", "▁world", "Ċ", "a$b$c"]
    result = text_result(n_layers=1, heads=1, tokens=toks)
    texts = svg_texts(figure_bytes(render_spec(result, FigureSpec(dpi=72)), "svg"))
    for t in ("hello", "world", "␣", "↵", "a$b$c"):
        assert t in texts, (t, texts)


def test_rollout_and_aggregates_are_titled():
    result = text_result()
    # the view model's words, as the screen's title says them (no second vocabulary in print)
    for agg, word in (("rollout", "rollout layers 0–1"), ("max", "layer 1 · max over heads")):
        texts = svg_texts(figure_bytes(render_spec(result, FigureSpec(agg=agg, dpi=72)), "svg"))
        assert any(word in t for t in texts), texts


def test_links_overlay_heads_in_distinct_colours_and_query_filter():
    result = text_result()
    fig = render_spec(result, FigureSpec(view="links", layer=1, heads=[0, 2], dpi=72))
    cols = [c for c in fig.axes[0].collections]
    assert len(cols) == 2
    c0, c2 = (tuple(np.round(c.get_colors()[0][:3], 3)) for c in cols)
    assert c0 != c2
    fig = render_spec(result, FigureSpec(view="links", layer=1, head=0, query=3, dpi=72))
    segs = fig.axes[0].collections[0].get_segments()
    assert segs and all(abs(s[0][1] - 3) < 1e-9 for s in segs)  # every line starts at query 3


def test_image_view_overlays_heat_on_the_image():
    result = vision_result()
    fig = render_spec(result, FigureSpec(view="image", query=0, head=1, dpi=72))
    ax = fig.axes[0]
    base, heat = ax.images
    assert base.get_array().shape[:2] == result.image.shape[:2]  # the (grey) base at the image's resolution
    assert heat.get_array().shape[:2] == result.image.shape[:2]  # heat upsampled to it


def test_strip_has_one_panel_per_word_plus_input():
    result = vision_result(decoder=True)
    fig = render_spec(result, FigureSpec(view="strip", dpi=72))
    assert len([ax for ax in fig.axes if ax.images]) == len(CAPTION) + 1  # and the panels' colour bar
    assert len(fig.axes) == len(CAPTION) + 2


def test_render_leaves_global_rcparams_alone():
    import matplotlib as mpl

    before = dict(mpl.rcParams)
    figure_bytes(render_spec(*_spec("heatmap", dpi=50)), "pdf")
    assert dict(mpl.rcParams) == before


def test_layer_range_keep_mass_log_scale_and_step():
    from matplotlib.colors import LogNorm

    from attnviz.core.reduce import aggregate_heads, keep_mass

    result = text_result()
    b = result.blocks()[0]
    fig = render_spec(result, FigureSpec(agg="max", layer_from=0, layer=1, keep=0.5, log=True, dpi=72))
    im = fig.axes[0].images[0]
    want = keep_mass(aggregate_heads(np.concatenate([b.layer(0), b.layer(1)]), "max"), 0.5)
    np.testing.assert_allclose(im.get_array(), want, atol=1e-6)
    assert isinstance(im.norm, LogNorm)
    texts = " ".join(svg_texts(figure_bytes(fig, "svg"))).replace("\n", " ")
    assert "layers 0–1" in texts and "max over heads" in texts and "top 50% mass" in texts and "log scale" in texts
    # step: the alignment keeps the words chosen so far; a decoder heatmap keeps the positions that existed
    mt = encdec_result()
    fig = render_spec(mt, FigureSpec(view="alignment", step=1, dpi=72))
    assert fig.axes[0].images[0].get_array().shape == (2, len(SOURCE))
    fig = render_spec(mt, FigureSpec(block="decoder self", step=1, dpi=72))
    assert fig.axes[0].images[0].get_array().shape == (2, 2)
    with pytest.raises(Exception, match=r"step 9 is out of range; 5 words were generated \(steps 0..4\)"):
        render_spec(mt, FigureSpec(view="alignment", step=9))


def test_the_command_line_resolves_to_the_view_models_selection_once():
    from attnviz.core import view as vm
    from attnviz.figures.select import resolve

    result = text_result()
    spec = FigureSpec(layer=0, head=2, hide_special=True)
    sel = resolve(result, spec)
    assert isinstance(sel, vm.Selection) and (sel.mode, sel.layer, sel.head, sel.hide_special) == ("head", 0, 2, True)
    fig = render_spec(result, spec)
    mv = vm.compute_map(result, sel)
    np.testing.assert_array_equal(fig.axes[0].images[0].get_array(), mv.matrix)
    assert mv.q_labels == TEXT_TOKENS[1:-1]
    # an aggregate over a range, a step, kept mass and the log scale land in the same fields the window sets
    sel = resolve(
        encdec_result(), FigureSpec(view="links", agg="max", layer_from=0, layer=1, keep=0.9, log=True, step=2)
    )
    assert (sel.mode, sel.layer_lo, sel.layer_hi, sel.keep, sel.log, sel.step) == ("max", 0, 1, 0.9, True, 2)
    assert resolve(result, FigureSpec(view="links", layer=1, heads=[2, 0])).heads == (2, 0)


def test_render_figure_draws_the_windows_own_selection():
    from attnviz.core import view as vm
    from attnviz.figures import FigureStyle, render_figure

    result = text_result()
    fig = render_figure(result, "heatmap", vm.Selection(mode="rollout"), FigureStyle(dpi=72))
    mv = vm.compute_map(result, vm.Selection(mode="rollout"))
    np.testing.assert_array_equal(fig.axes[0].images[0].get_array(), mv.matrix)
    assert fig.attnviz_selection == vm.Selection(mode="rollout")
    assert fig.axes[0].get_title().replace("\n", " · ") == f"tiny-bert · {mv.title}"  # the screen's title words
    with pytest.raises(TypeError, match="Selection"):
        render_figure(result, "heatmap", FigureSpec())  # type: ignore[arg-type]


def test_text_strip_has_one_shaded_source_row_per_generated_word():
    result = encdec_result()
    fig = render_spec(result, FigureSpec(view="strip", dpi=72))
    texts = svg_texts(figure_bytes(fig, "svg"))
    for w in TARGET_GEN:
        assert w in texts
    assert texts.count("Haus") == len(TARGET_GEN)  # the source once per generated word
    fig = render_spec(result, FigureSpec(view="strip", step=1, dpi=72))
    assert svg_texts(figure_bytes(fig, "svg")).count("Haus") == 2


@pytest.mark.parametrize(
    "convert",
    [
        lambda im: im[..., 0],
        lambda im: im / 255.0,
        lambda im: np.concatenate([im, np.full(im.shape[:2] + (1,), 255, np.uint8)], -1),
    ],
)
def test_image_views_accept_grey_float_and_rgba_images(convert):
    result = vision_result(decoder=True)
    result.image = convert(result.image)
    for view in ("image", "strip"):
        fig = render_spec(result, FigureSpec(view=view, dpi=40))
        assert fig.axes[0].images[0].get_array().shape[:2] == (64, 64)


def test_applicable_views_for_menus():
    from attnviz.figures import applicable_views

    text = applicable_views(text_result())
    assert list(text) == ["heatmap", "overview", "links", "alignment", "image", "audio", "strip"]
    assert text["heatmap"] is None and "cross-attention" in text["alignment"] and "image" in text["image"]
    assert "speech model" in text["audio"]
    assert "generated words" in text["strip"]
    cap = applicable_views(vision_result(decoder=True))
    assert all(v is None for k, v in cap.items() if k != "audio") and "speech model" in cap["audio"]


def test_overview_of_one_layer_is_a_grid_of_its_heads():
    result = text_result()  # 2 layers x 3 heads
    panels = [a for a in render_spec(result, FigureSpec(view="overview", dpi=40)).axes if a.images]
    assert len(panels) == 6
    one = [a for a in render_spec(result, FigureSpec(view="overview", layer=1, dpi=40)).axes if a.images]
    assert [a.get_title() for a in one] == ["H0", "H1", "H2"]
    np.testing.assert_allclose(one[2].images[0].get_array(), result.blocks()[0].head(1, 2), atol=1e-7)
