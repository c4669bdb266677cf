"""Publication figures as a reviewer reads them, from the written file (figaudit26): PDF and SVG text, a PDF's
drawn image sizes, PNG pixels.

A self-attention map (the same tokens on both axes) keeps square cells at ``--width single``: a 32-token map (the
forecasting demo's) was stretched to the rows' label pitch, its cells drawn twice as tall as wide.  An alignment
(generated words x source words) still gets the pitch that labels every row.  The image strip says its panels are
each on their own scale; an overview's head labels never touch; token links carry a key to their lines."""

from __future__ import annotations

import re

import numpy as np
import pytest
from _pdfimages import _CM
from _pdftext import _objects, pdf_text
from figure_data import _axis, softmax_maps, vision_result
from PIL import Image

from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo
from attnviz.figures import FigureSpec, render_spec, save_figure


def drawn_sizes(data: bytes) -> dict[tuple[int, int], tuple[float, float]]:
    """image (width, height) in pixels -> (width, height) in points as the page draws it: the product of the
    ``cm`` matrices between the ``q`` before the image's ``Do`` and the ``Do`` (matplotlib draws an image in one
    q..Q), read from the PDF's bytes."""
    objs = _objects(data)
    names: dict[bytes, int] = {}
    for head, _ in objs.values():
        for name, ref in re.findall(rb"/(I\d+) (\d+) 0 R", head):
            names[name] = int(ref)
    sizes = {}
    for _, stream in objs.values():
        if stream is None:
            continue
        for m in re.finditer(rb"/(I\d+) Do", stream):
            ctm = np.eye(3)
            for cm in _CM.finditer(stream, stream.rfind(b"q", 0, m.start()), m.start()):
                a, b, c, d, e, f = map(float, cm.groups())
                ctm = np.array([[a, b, 0], [c, d, 0], [e, f, 1]]) @ ctm
            head = objs[names[m.group(1)]][0]
            px = tuple(int(re.search(rb"/" + k + rb" (\d+)", head).group(1)) for k in (b"Width", b"Height"))
            sizes[px] = (abs(float(ctm[0, 0])), abs(float(ctm[1, 1])))
    return sizes


def _self_attention(n: int) -> AttentionResult:
    m = softmax_maps(np.random.default_rng(0), 1, n, n, causal=True)
    site = SiteInfo("decoder", "self", 0, 1, "softmax_0", "softmax")
    return AttentionResult([DenseMap(m)], [site], tokens=_axis([f"t{i}" for i in range(n)]))


def _alignment(nq: int, nk: int) -> AttentionResult:
    rng = np.random.default_rng(1)
    sites = [SiteInfo("encoder", "self", 0, 1, "e0", "softmax"), SiteInfo("decoder", "cross", 0, 1, "c0", "softmax")]
    maps = [DenseMap(softmax_maps(rng, 1, nk, nk)), DenseMap(softmax_maps(rng, 1, nq, nk))]
    dec = ["<s>"] + [f"w{i}" for i in range(nq - 1)]
    return AttentionResult(
        maps,
        sites,
        tokens=_axis([f"s{i}" for i in range(nk)]),
        key_tokens=_axis(dec),
        generated=dec[1:],
        prompt_len=1,
        info={"model": "tiny-translate"},
    )


@pytest.mark.parametrize("n", [24, 32, 40])
@pytest.mark.parametrize("width", ["single", "double"])
def test_a_self_attention_map_at_a_column_width_has_square_cells(tmp_path, n, width):
    out = save_figure(render_spec(_self_attention(n), FigureSpec(width=width, head=0)), tmp_path / "map.pdf")
    w_pt, h_pt = drawn_sizes(out.read_bytes())[(n, n)]  # the map, a pixel a cell
    assert h_pt == pytest.approx(w_pt, rel=0.02), f"{n} x {n} map drawn {w_pt:.1f} x {h_pt:.1f} pt"


def test_an_alignment_at_single_width_still_labels_every_generated_word(tmp_path):
    # 24 generated words over 40 source words: rows at the label pitch, so every word is a tick label
    fig = render_spec(_alignment(25, 40), FigureSpec(view="alignment", width="single", head=0))
    out = save_figure(fig, tmp_path / "align.svg")
    text = out.read_text()
    labels = set(re.findall(r">([^<>]+)</text>", text))  # the figure's SVG keeps its text as <text> elements
    assert {f"w{i}" for i in range(24)} <= labels


def test_an_image_strip_says_each_panel_is_on_its_own_scale(tmp_path):
    # each word's overlay is stretched to that word's largest weight; the strip had no colour bar and said nothing
    result = vision_result(decoder=True)
    for width in (None, "single"):
        out = save_figure(render_spec(result, FigureSpec(view="strip", width=width)), tmp_path / f"strip-{width}.pdf")
        text = " ".join(pdf_text(out.read_bytes()))
        assert "each panel stretched to its own maximum" in " ".join(text.split()), text
        assert {"0", "max"} <= set(pdf_text(out.read_bytes()))


def test_the_strip_bar_label_lies_inside_the_page(tmp_path):
    # at a column's width the label wraps to two lines: both inside the page, below the last panel's word
    fig = render_spec(vision_result(decoder=True), FigureSpec(view="strip", width="single", dpi=100))
    out = save_figure(fig, tmp_path / "strip.png")
    png = np.asarray(Image.open(out).convert("L"))
    ink_rows = np.flatnonzero((png < 128).any(axis=1))
    assert ink_rows.max() < png.shape[0] - 2  # the last line of ink ends above the bottom edge, not cut by it


def _header_boxes(svg: str, fs: float = 7.0) -> list[tuple[float, float, str]]:
    """The overview's head labels ("H3"): (left, right, text) in points, from the SVG's centred <text> elements."""
    from attnviz.figures.layout import text_width_pt

    found = re.findall(r'text-anchor: middle" x="([\d.]+)"[^>]*>(H\d+)</text>', svg)
    return sorted((float(x) - text_width_pt(t, fs) / 2, float(x) + text_width_pt(t, fs) / 2, t) for x, t in found)


@pytest.mark.parametrize("width", ["single", "double", None])
def test_an_overviews_head_labels_never_touch(tmp_path, width):
    # 12 layers x 12 heads (BERT-base's shape) at a single column: "H10" and "H11" overlapped and read as one
    from figure_data import text_result

    result = text_result(n_layers=12, heads=12, tokens=[f"w{i}" for i in range(20)])
    out = save_figure(render_spec(result, FigureSpec(view="overview", width=width)), tmp_path / "overview.svg")
    boxes = _header_boxes(out.read_text())
    assert boxes[0][2] == "H0" and len(boxes) >= 6  # labelled, if not every head
    for (_, right, a), (left, _, b) in zip(boxes, boxes[1:]):
        assert left - right >= 1.5, f"{a} and {b} are {left - right:.2f} pt apart"


@pytest.mark.parametrize("width", ["single", None])
def test_token_links_carry_a_key_to_their_lines(tmp_path, width):
    # the lines' width and opacity are the weight over the largest drawn, weak ones left out: the figure said neither
    from figure_data import text_result

    result = text_result(n_layers=2, heads=3)
    out = save_figure(render_spec(result, FigureSpec(view="links", layer=1, head=2, width=width)), tmp_path / "l.pdf")
    text = " ".join(" ".join(pdf_text(out.read_bytes())).split())
    top = float(result.maps[1].array()[0, 2].max())  # the drawn head's largest weight, from the result itself
    assert f"line width and opacity grow with the weight (full at {top:.3g})" in text, text
    assert "under 5% of that, or past a token's 12 strongest: not drawn" in text
