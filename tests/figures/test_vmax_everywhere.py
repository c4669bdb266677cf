"""The colour scale's top set by hand (``Selection.vmax``: `figure --vmax`, `open --vmax`, the window's colour-top
box) is read by every view that draws a colour scale (view28): the head map and alignment, the overview, image
regions (several heads on one scale too) and the strip, over an image as over text.  Before, the image strip drew
each panel stretched to its own maximum whatever --vmax said.

Independent checks: the colour limits are the number given, the maps' drawn values are the weights themselves
(read from the result's arrays), and the image strip's panel colours are the colour map of the fixed-scale heat
(the smoothed weights) over the top, clipped, computed here."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from figure_data import encdec_result, text_result, vision_result

from attnviz.core import view as vm
from attnviz.figures import FigureSpec, render_spec

TOP = 0.05


@pytest.mark.parametrize(
    "bad", [0, -1, 0.0, "0", "-0.5", "abc", "nan", float("nan"), "inf", float("inf"), True, "٣", "1_0", "0.5x"]
)
def test_a_bad_top_is_refused_in_one_line_naming_the_fix(bad):
    with pytest.raises(vm.ViewError) as e:
        vm.check_vmax(bad)
    assert "vmax" in str(e.value) and "> 0" in str(e.value) and "\n" not in str(e.value)
    assert e.value.param == "vmax"  # the window marks its colour-top box
    with pytest.raises(vm.ViewError):  # the command line's form of it says the same
        FigureSpec(vmax=bad)


@pytest.mark.parametrize(
    "given, want", [(None, None), ("", None), ("  ", None), ("0.25", 0.25), (3, 3.0), (1e-4, 1e-4)]
)
def test_a_good_top_or_none(given, want):
    assert vm.check_vmax(given) == want


@pytest.mark.parametrize("scale", ["fixed", "shared", "map"])
def test_the_maps_top_is_the_one_set_by_hand_whatever_the_scale(scale):
    result = text_result()
    sel = vm.Selection(mode="head", layer=1, head=0, scale=scale, vmax=TOP)
    mv = vm.compute_map(result, sel)
    np.testing.assert_array_equal(mv.matrix, result.maps[1].array()[0, 0])  # the weights themselves
    assert mv.vmax == TOP and mv.by_hand
    assert vm.map_label(mv, False) == "attention weight (top 0.05 set by hand)"
    assert vm.map_label(mv, True) == "attention weight (log scale, top 0.05 set by hand)"
    assert not vm.compute_map(result, sel.with_(vmax=None)).by_hand
    fig = render_spec(result, FigureSpec(layer=1, head=0, scale=scale, vmax=TOP, dpi=40))
    norm = fig.axes[0].images[0].norm
    assert (norm.vmin, norm.vmax) == (0.0, TOP)


def test_the_overview_shares_the_top_set_by_hand():
    result = text_result()
    thumbs = vm.thumbnails(result, vm.Selection(), vm.THUMB)
    assert max(float(m.max()) for m in thumbs.values()) > TOP  # the clip is exercised
    assert vm.overview_top(thumbs, "shared", TOP) == TOP
    assert vm.overview_label(True, "fixed", TOP) == "attention weight (log scale, top 0.05 set by hand)"
    fig = render_spec(result, FigureSpec(view="overview", vmax=TOP, log=True, dpi=40))
    panels = [a for a in fig.axes if a.images]
    assert {(a.images[0].norm.vmin, a.images[0].norm.vmax) for a in panels} == {(TOP / 1000, TOP)}
    assert fig.axes[-1].get_ylabel().replace("\n", " ") == "attention weight (log scale, top 0.05 set by hand)"


def test_the_alignment_and_the_text_strip_take_the_top():
    result = encdec_result()
    fig = render_spec(result, FigureSpec(view="alignment", vmax=TOP, dpi=40))
    assert fig.axes[0].images[0].norm.vmax == TOP
    sv = vm.strip_view(result, vm.Selection(scale="map", vmax=TOP))
    assert sv.vmax == TOP and max(float(p.weights.max()) for p in sv.panels) > TOP
    fig = render_spec(result, FigureSpec(view="strip", scale="map", vmax=TOP, dpi=40))
    bar = next(a for a in fig.axes if getattr(a, "_colorbar", None) is not None)._colorbar
    assert (bar.norm.vmin, bar.norm.vmax) == (0.0, TOP) and "top 0.05 set by hand" in bar.ax.get_xlabel()


def _panels(fig):
    """The image strip's word panels, left to right (the first picture is the input image alone)."""
    return [a for a in fig.axes if len(a.images) == 2]


def test_the_image_strip_puts_every_panel_on_the_top_set_by_hand():
    """`figure --view strip --vmax V` over an image: each word's panel is the colour map of its weights over V
    (clipped), one bar 0..V for all; without V each panel is stretched to its own maximum (Xu et al.), as before."""
    from matplotlib import colormaps

    from attnviz.figures.select import resolve

    result = vision_result(decoder=True)
    sel = resolve(result, FigureSpec(view="strip"))  # the figure's heads (the mean over the last layer's)
    sv = vm.strip_view(result, sel)
    assert sv.image and len(sv.panels) >= 3
    cmap = colormaps[vm.OVERLAY_CMAP]
    free = render_spec(result, FigureSpec(view="strip", dpi=40))
    fixed_top = render_spec(result, FigureSpec(view="strip", vmax=TOP, dpi=40))
    isel = vm.panel_selection(sel.with_(block=sv.block_index))
    tops = []
    for k, (p_free, p_top) in enumerate(zip(_panels(free), _panels(fixed_top), strict=True)):
        # the word's smoothed weights: its overlay on the fixed 0–1 scale is the weights themselves
        weights = vm.overlay_view(result, isel.with_(query=sv.panels[k].row, image_scale="fixed")).heat
        tops.append(float(weights.max()))
        want = cmap(np.clip(weights / TOP, 0.0, 1.0))[..., :3]
        np.testing.assert_allclose(np.asarray(p_top.images[1].get_array())[..., :3], want, atol=1e-6)
        # without --vmax: its own maximum, as before (the drawn top: the smoothed map sampled 8 times a cell)
        own = vm.overlay_view(result, isel.with_(query=sv.panels[k].row)).scale
        assert not own.by_hand and own.vmax == pytest.approx(weights.max(), rel=0.02)
        stretched = cmap(np.clip(weights / own.vmax, 0.0, 1.0))[..., :3]
        np.testing.assert_allclose(np.asarray(p_free.images[1].get_array())[..., :3], stretched, atol=1e-6)
    assert max(tops) > TOP  # some panel's weights pass the top: the clip is exercised
    bar = next(a for a in fixed_top.axes if getattr(a, "_colorbar", None) is not None)._colorbar
    assert (bar.norm.vmin, bar.norm.vmax) == (0.0, TOP)
    assert "top 0.05 set by hand" in bar.ax.get_xlabel().replace("\n", " ")
    assert [t.get_text() for t in bar.ax.get_xticklabels()][-1] == "0.05"
    free_bar = next(a for a in free.axes if getattr(a, "_colorbar", None) is not None)._colorbar
    assert [t.get_text() for t in free_bar.ax.get_xticklabels()] == ["0", "max"]
    assert free_bar.ax.get_xlabel().replace("\n", " ") == vm.IMAGE_STRIP_LABEL


def test_several_pictures_share_the_top_set_by_hand():
    """`figure --view image` with several heads (a row of pictures) on the stretched scale: refused alone (each
    would have its own top), drawn with --vmax on the one top."""
    result = vision_result()
    spec = dict(view="image", layer=1, heads=[0, 1], query=0, image_scale="map", dpi=40)
    with pytest.raises(vm.ViewError):
        render_spec(result, FigureSpec(**spec))
    fig = render_spec(result, FigureSpec(**spec, vmax=TOP))
    pictures = [a for a in fig.axes if len(a.images) == 2]
    assert len(pictures) == 2
    bar = fig.axes[-1]
    assert bar.get_ylim() == pytest.approx((0.0, TOP)) and not math.isclose(TOP, 1.0)
