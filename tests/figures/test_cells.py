"""A figure's map drawn by :class:`attnviz.figures.cells.CellImage`: the pixels of matplotlib's own nearest-sampled
``imshow`` (the reference here is matplotlib's ``AxesImage`` drawing the same axes), in a few bytes an output pixel
where matplotlib's float pipeline took ~100 (a 16 in figure of any long map took 1.5 GB)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from figure_data import _axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm, TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.text import Text

from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo
from attnviz.figures import FigureSpec, render_spec
from attnviz.figures.cells import CellImage, as_cells
from attnviz.figures.layout import FIT, PT
from attnviz.figures.render import figure_bytes


def _pixels(fig) -> np.ndarray:
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba()).copy()


def _both(fig, image) -> tuple[np.ndarray, np.ndarray]:
    """``fig`` drawn with ``image`` as a CellImage, then as matplotlib's AxesImage (nothing else changed; drawn
    once before, so that a layout engine has settled)."""
    image.__class__ = CellImage
    _pixels(fig)
    ours = _pixels(fig)
    image.__class__ = AxesImage
    return ours, _pixels(fig)


CASES = [  # rows, cols, inches w x h, dpi, norm, pooled extent: up- and down-sampled, odd sizes, cells < 3 px
    (12, 12, 3, 3, 110, None, None),
    (7, 13, 4.3, 2.7, 300, None, None),
    (512, 512, 9, 9, 200, None, None),
    (900, 1100, 5, 4, 150, "log", None),
    (300, 200, 7.77, 5.1, 97, "signed", (-0.5, 599.5, 899.5, -0.5)),
    (3, 5, 1.1, 1.3, 55, None, None),
]


@pytest.mark.parametrize(("rows", "cols", "w", "h", "dpi", "norm", "extent"), CASES)
def test_cells_are_the_pixels_of_matplotlibs_nearest_imshow(rows, cols, w, h, dpi, norm, extent):
    rng = np.random.default_rng(rows * cols)
    m = rng.random((rows, cols)).astype(np.float32)
    kw = {}
    if norm == "log":
        kw = {"norm": LogNorm(1e-3, 1.0, clip=True)}
    elif norm == "signed":
        m = m - 0.5
        kw = {"norm": TwoSlopeNorm(0.0, -0.5, 0.5), "cmap": "RdBu_r"}
    fig = Figure(figsize=(w, h), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    im = ax.imshow(m, aspect="auto", interpolation="nearest", extent=extent, **kw)
    fig.colorbar(im, ax=ax)
    ours, theirs = _both(fig, im)
    assert ours.shape == theirs.shape
    assert not (ours != theirs).any(axis=-1).sum()


def _as_matplotlibs(fig):
    for ax in fig.axes:
        for im in ax.images:
            if isinstance(im, CellImage):
                im.__class__ = AxesImage
    return fig


@pytest.mark.parametrize(
    ("data", "view", "fmt"),
    # (PDF and SVG embed the cells themselves, not this drawing: tests/figures/test_vector_cells.py)
    [
        ("text", "heatmap", "png"),
        ("encdec", "heatmap", "png"),
        ("text", "overview", "png"),
        ("encdec", "alignment", "png"),
    ],
)
def test_a_figure_is_byte_for_byte_the_one_matplotlibs_imshow_draws(data, view, fmt, request):
    # two fresh renders, each saved once (a layout engine moves text by a fraction of a pixel between the first
    # and later draws of one figure, whatever draws the map)
    result = request.getfixturevalue(data)
    ours = render_spec(result, FigureSpec(view=view, dpi=150))
    assert all(isinstance(im, CellImage) for ax in ours.axes for im in ax.images)
    theirs = _as_matplotlibs(render_spec(result, FigureSpec(view=view, dpi=150)))
    assert figure_bytes(ours, fmt) == figure_bytes(theirs, fmt)


def _long(n: int) -> AttentionResult:
    rng = np.random.default_rng(n)
    m = (rng.random((1, 1, n, n), dtype=np.float32) * 0.02).astype(np.float32)
    m[0, 0, np.arange(n), np.arange(n)] = 0.5
    site = SiteInfo("encoder", "self", 0, 1, "softmax_0", "softmax")
    return AttentionResult([DenseMap(m)], [site], tokens=_axis([f"t{i}" for i in range(n)]))


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_long_maps_figure_holds_a_few_bytes_an_output_pixel_and_a_bounded_number_of_labels():
    n = 1200
    fig = render_spec(_long(n), FigureSpec(dpi=150))  # 16 in: a ~1,900 px square map, ~3.6 million pixels
    ax = fig.axes[0]
    im = ax.images[0]
    fig.canvas.draw()  # layout settled: the draws measured below place the image the same way
    x0, y0, x1, y1 = im.get_window_extent().extents
    pixels = (x1 - x0) * (y1 - y0)
    # the map's own draw, on the canvas's renderer after the figure's: every array of the image pipeline
    # (make_image, the resampling, the colours) is allocated in it; the ~2,400 tick labels' text drawing is not the
    # measured thing and, traced, took ~12 of the test's ~14 s (the peaks, drawing the whole figure or the image
    # alone, agreed to 0.1 %: 62.40 / 62.36 MB ours, 422.95 / 422.90 MB theirs)
    renderer = fig.canvas.get_renderer()
    ours = _peak(lambda: im.draw(renderer))
    im.__class__ = AxesImage
    theirs = _peak(lambda: im.draw(renderer))
    im.__class__ = CellImage
    # a float32 cell number and its int32 index per pixel, the uint32 colours: 12 bytes; matplotlib's float
    # RGBA copies were ~10 x that
    assert ours < 16 * pixels, f"{ours:,} bytes for {pixels:,.0f} pixels"
    assert theirs > 3 * ours  # what the swap saves (the measure would show a regression back to it)
    # labels: as many as fit legibly on each side (the window's thinning rule), never one per position
    fs = float(fig.attnviz_style.font_size)
    fit = (x1 - x0) / fig.dpi / (fs * FIT * PT) + (y1 - y0) / fig.dpi / (fs * FIT * PT)
    labels = [t for t in (*ax.get_xticklabels(), *ax.get_yticklabels()) if t.get_text()]
    assert 10 < len(labels) <= fit + 4 < n
    assert len(fig.findobj(Text)) < 2 * fit + 100  # a tick holds two (the far side's hidden)


def test_a_long_maps_png_is_the_same_file_drawn_either_way():
    ours = render_spec(_long(700), FigureSpec(dpi=100))
    theirs = _as_matplotlibs(render_spec(_long(700), FigureSpec(dpi=100)))
    assert figure_bytes(ours, "png") == figure_bytes(theirs, "png")


def test_as_cells_keeps_the_images_state():
    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    m = np.arange(6, dtype=np.float32).reshape(2, 3)
    im = ax.imshow(m, interpolation="nearest", extent=(0, 3, 2, 0))
    before = (im.get_extent(), im.get_cmap().name, im.norm.vmin, im.norm.vmax, ax.get_xlim())
    assert as_cells(im) is im and isinstance(im, CellImage)
    assert (im.get_extent(), im.get_cmap().name, im.norm.vmin, im.norm.vmax, ax.get_xlim()) == before
    np.testing.assert_array_equal(im.get_array(), m)


def test_a_matplotlib_without_the_private_resampler_draws_its_own_way(monkeypatch):
    """CellImage leans on matplotlib's private ``image._resample`` (pinned only as matplotlib>=3.8): where a
    version lacks it, the figure is matplotlib's own drawing, not an AttributeError."""
    import types

    from attnviz.figures import cells

    m = np.random.default_rng(3).random((40, 60)).astype(np.float32)
    fig = Figure(figsize=(3, 2), dpi=80)
    FigureCanvasAgg(fig)
    im = fig.add_subplot().imshow(m, aspect="auto", interpolation="nearest")
    ours, theirs = _both(fig, im)  # with the resampler: the cells path, pixel-equal
    assert (ours == theirs).all()
    monkeypatch.setattr(cells, "mimage", types.SimpleNamespace())  # a version whose private name moved
    again, _ = _both(fig, im)
    assert (again == theirs).all()
