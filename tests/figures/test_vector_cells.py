"""Vector figures embed a map at cell resolution: one image pixel a cell (a pooled cell where the map has more cells
than the figure has pixels), scaled by the viewer without smoothing (in SVG a block of pixels a cell, for librsvg,
which smooths); the photo of an image overlay at its own pixels.  Checked on the files' bytes (the PDF's image XObjects decoded by hand, the SVG's embedded PNG) against
the colour map applied to the numbers by hand; the PNG output is matplotlib's own drawing, byte for byte."""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess
from unittest import mock

import numpy as np
import pytest
from _pdfimages import pdf_images
from figure_data import vision_result
from matplotlib import colormaps
from matplotlib.image import AxesImage
from PIL import Image
from test_cells import _long

from attnviz.core import view as vm
from attnviz.figures import FigureSpec, render_spec, svg_out
from attnviz.figures.cells import VectorCells
from attnviz.figures.render import figure_bytes


def _by_hand(m: np.ndarray, vmax: float, cmap: str = "viridis") -> np.ndarray:
    """``m``'s cells coloured as a linear 0..vmax map: the colour map on the numbers, nothing of the figure's."""
    x = np.clip(m.astype(np.float32) / np.float32(vmax), 0, 1)
    return colormaps[cmap](x, bytes=True)[..., :3]


def _max_pool(m: np.ndarray, fq: int, fk: int) -> np.ndarray:
    """Max of each run of ``fq`` rows x ``fk`` keys (the last runs shorter), by hand."""
    q, k = m.shape
    pad = np.full((-(-q // fq) * fq, -(-k // fk) * fk), -np.inf, np.float32)
    pad[:q, :k] = m
    return pad.reshape(pad.shape[0] // fq, fq, pad.shape[1] // fk, fk).max(axis=(1, 3))


def _map(n: int) -> np.ndarray:
    return np.asarray(_long(n).maps[0].array(), np.float32)[0, 0]


@pytest.mark.parametrize("n", [12, 37])
def test_a_pdf_embeds_the_map_a_pixel_a_cell_unsmoothed_in_the_colour_maps_colours(n):
    m = _map(n)
    data = figure_bytes(render_spec(_long(n), FigureSpec(dpi=150)), "pdf")
    images = pdf_images(data)
    cells = [im for im in images if (im.height, im.width) == m.shape]
    assert len(cells) == 1, [(im.width, im.height) for im in images]  # the map: n x n pixels, not ~13 in x 150 dpi
    assert all(im.interpolate is False for im in images)  # every image: /Interpolate false
    np.testing.assert_array_equal(cells[0].rgb, _by_hand(m, m.max()))


def test_a_pdf_of_a_map_longer_than_the_figures_pixels_embeds_its_pooled_cells():
    n, dpi = 700, 30  # a ~13 in map at 30 dpi: ~400 pixels a side, so runs of 2 positions a cell
    m = _map(n)
    fig = render_spec(_long(n), FigureSpec(dpi=dpi))
    side = fig.axes[0].get_window_extent().width  # the map's pixels at the figure's dpi: fewer than its cells
    (im,) = [im for im in pdf_images(figure_bytes(fig, "pdf")) if im.width > 100]
    assert side < n and (im.height, im.width) == (350, 350)  # ~a pixel a cell (planned before the final layout)
    np.testing.assert_array_equal(im.rgb, _by_hand(_max_pool(m, 2, 2), m.max()))


def _svg_map(svg: str, shape: tuple[int, int]) -> tuple[str, np.ndarray, np.ndarray]:
    """The SVG's ``<image>`` of the map (the one whose pixels are a whole multiple of ``shape``), its pixels
    (RGB) and its placement ``[x0, y0, x1, y1]`` in the SVG's user units (points), from the tag's own matrix."""
    for tag in re.findall(r"<image [^>]*>", svg):
        w, h = (int(float(re.search(rf' {a}="([^"]+)"', tag).group(1))) for a in ("width", "height"))
        if h % shape[0] == 0 and w % shape[1] == 0 and "matrix(" in tag:
            png = base64.b64decode(re.search(r'href="data:image/png;base64,([^"]+)"', tag).group(1))
            rgb = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
            a, _, _, d, e, f = map(float, re.search(r"matrix\(([^)]+)\)", tag).group(1).split())
            return tag, rgb, np.array([e, f, e + a * w, f + d * h])
    raise AssertionError("no map image in the SVG")


def test_an_svg_embeds_each_cell_as_a_block_of_one_colour_at_print_resolution_marked_crisp():
    n = 12
    m = _map(n)
    svg = figure_bytes(render_spec(_long(n), FigureSpec(dpi=150)), "svg").decode()
    tag, rgb, box = _svg_map(svg, m.shape)
    # pixelated for today's renderers, then optimizeSpeed (crisp-edges' old name) for those that know only it
    assert 'style="image-rendering:crisp-edges;image-rendering:pixelated;image-rendering:optimizeSpeed"' in tag
    ky, kx = rgb.shape[0] // n, rgb.shape[1] // n
    inches = (box[2:] - box[:2]) / 72  # user units are points
    assert rgb.shape[1] / inches[0] >= 300 and rgb.shape[0] / inches[1] >= 300  # print resolution: >= 300 dpi
    assert kx > 1 and ky > 1
    # every pixel of cell (i, j)'s block is the colour map on m[i, j], by hand
    np.testing.assert_array_equal(rgb, np.repeat(np.repeat(_by_hand(m, m.max()), ky, axis=0), kx, axis=1))


def _blended(svg: str, shape: tuple[int, int], cell_colours: np.ndarray, tmp_path) -> float:
    """The share of the map's pixels, as ``rsvg-convert`` draws the SVG at 300 dpi, that are none of the cells'
    colours: librsvg's smoothing, which it applies whatever the image asks."""
    _, _, box = _svg_map(svg, shape)
    width_pt = float(re.search(r'<svg [^>]*viewBox="0 0 ([0-9.]+) ', svg).group(1))
    src, out = tmp_path / "f.svg", tmp_path / "f.png"
    src.write_text(svg)
    px = round(width_pt * 300 / 72)
    subprocess.run(["rsvg-convert", "--width", str(px), "-o", str(out), str(src)], check=True, timeout=60)
    drawn = np.asarray(Image.open(out).convert("RGB"))
    x0, y0, x1, y1 = np.round(box * px / width_pt).astype(int)
    inner = drawn[y0 + 2 : y1 - 2, x0 + 2 : x1 - 2]  # the map, its outline's pixels left out

    def packed(rgb: np.ndarray) -> np.ndarray:
        return rgb[..., 0].astype(np.uint32) << 16 | rgb[..., 1].astype(np.uint32) << 8 | rgb[..., 2]

    return float(1 - np.isin(packed(inner), packed(cell_colours)).mean())


@pytest.mark.skipif(shutil.which("rsvg-convert") is None, reason="rsvg-convert (librsvg2-bin) is not installed")
def test_librsvg_draws_an_svgs_cells_crisp(tmp_path):
    n = 12
    m = _map(n)
    fig = render_spec(_long(n), FigureSpec(dpi=150))
    svg = figure_bytes(fig, "svg").decode()
    colours = _by_hand(m, m.max()).reshape(-1, 3)
    # the blocks' edges are the only blend: about a pixel on each cell's side (a cell is ~43 px here)
    assert _blended(svg, m.shape, colours, tmp_path) < 0.06  # 2.4 % here
    # what one pixel a cell drew in librsvg, which smooths it (the old SVG): a blur, most pixels blended
    with mock.patch.object(svg_out, "PRINT_DPI", 0):
        one_a_cell = figure_bytes(fig, "svg").decode()
    assert _svg_map(one_a_cell, m.shape)[1].shape[:2] == m.shape
    assert _blended(one_a_cell, m.shape, colours, tmp_path) > 0.5  # 79 % here


def _as_matplotlibs(fig):
    """``fig`` with every attnviz image class swapped back to matplotlib's AxesImage (its data and settings kept)."""
    for ax in fig.axes:
        for im in ax.images:
            im.__class__ = AxesImage
    return fig


@pytest.mark.parametrize(("data", "view"), [("long", "heatmap"), ("vision", "image"), ("captioner", "strip")])
def test_png_output_is_matplotlibs_own_drawing_byte_for_byte(data, view):
    # the vector-only behaviours (cells unsampled, the photo and its heat composited) leave Agg's drawing alone
    result = {"long": lambda: _long(40), "vision": vision_result, "captioner": lambda: vision_result(decoder=True)}[
        data
    ]
    ours = render_spec(result(), FigureSpec(view=view, dpi=110))
    assert any(isinstance(im, VectorCells) or type(im) is not AxesImage for ax in ours.axes for im in ax.images)
    theirs = _as_matplotlibs(render_spec(result(), FigureSpec(view=view, dpi=110)))
    assert figure_bytes(ours, "png") == figure_bytes(theirs, "png")


def test_an_image_overlays_pdf_embeds_the_photo_at_its_own_pixels_under_its_heat():
    result = vision_result()  # a 64 x 64 photo in a ~2 in panel: 300 pixels at 150 dpi
    fig = render_spec(result, FigureSpec(view="image", image_base="colour", cmap="magma", dpi=150))
    photo = np.asarray(result.image, np.float32) / 255.0
    # the view model's heat at the photo's pixels (its smoothed patch map), as the figure's Selection draws it
    ov = vm.overlay_view(result, fig.attnviz_selection.with_(keep=1.0, hide_special=False), photo.shape[:2])
    assert ov.base == "colour"
    a = (0.2 + 0.7 * ov.heat)[..., None]  # the heat's opacity over an image (grows with the weight)
    want = np.round(255 * (photo * (1 - a) + colormaps["magma"](ov.heat)[..., :3] * a))
    images = pdf_images(figure_bytes(fig, "pdf"))
    (im,) = [im for im in images if (im.height, im.width) == photo.shape[:2]]  # one image: photo and heat
    assert im.interpolate is False
    assert np.abs(im.rgb.astype(int) - want.astype(int)).max() <= 1
