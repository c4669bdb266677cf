"""Image regions in the window on the colour-scale and log boxes (scale26): the boxes are live on the tab, the colour
bar states the scale in force in weights, the Export view figure's bar the same limits, and on the shared scale
stepping through heads leaves the bar where it is (the colours compare), while each head's stretched bar moves.

Independent check: the shared top is computed here with numpy from the result's maps (every layer's heads, [CLS]'s
row over the patch keys); the figure's limits are read back from matplotlib's colour-bar axes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gui_helpers import open_and_wait

pytest.importorskip("matplotlib")

from attnviz.figures import FigureStyle, render_figure

ROOT = Path(__file__).resolve().parents[2]
VIT = ROOT / "models" / "vit-classification.onnx"
CAPTIONER = ROOT / "models" / "captioning.onnx"


def _bar(v) -> tuple[float, float]:
    return tuple(float(x) for x in v.colorbar.levels())


def _figure_bar(w) -> tuple[float, float]:
    fig = render_figure(w.session.result, *w.figure_selection(w.image_regions), FigureStyle(dpi=30))
    return fig.axes[-1].get_ylim()


def test_the_scale_boxes_drive_the_image_colour_bar(qtbot, real_window):
    w = real_window
    open_and_wait(qtbot, w, VIT)
    w.select_view("image")
    v = w.image_regions
    assert w.controls.scale.isEnabled() and w.controls.log.isEnabled()
    s = w.session
    blk = s.blocks[v.source()[0]]
    grid = v.source()[1]
    by_hand = max(
        float(blk.head(layer, h)[0, grid.offset : grid.end].max())
        for layer in range(blk.n_layers)
        for h in range(blk.heads_in(layer))
    )
    s.select(mode="head", layer=1, head=0)
    tops = {}
    for head in range(blk.heads_in(1)):
        s.select(head=head)
        for scale in ("fixed", "shared", "map"):
            for log in (False, True):
                s.select(image_scale=scale, log=log)
                w.controls.sync()
                assert w.controls.scale.currentData() == scale and w.controls.log.isChecked() == log
                lo, hi = _bar(v)
                weights = (10**lo, 10**hi) if log else (lo, hi)
                if scale == "map":  # the smoothed map's peak: under the head's largest weight, above its mean
                    assert v.patch_map.mean() < weights[1] <= v.patch_map.max()
                else:
                    assert weights[1] == pytest.approx({"fixed": 1.0, "shared": by_hand}[scale], rel=1e-5)
                assert weights[0] == (pytest.approx(weights[1] / 1000, rel=1e-5) if log else 0.0)
                # the figure File ▸ Export view writes: the same limits, from the same view model
                f_lo, f_hi = _figure_bar(w)
                got = (np.log10(f_lo), np.log10(f_hi)) if log else (f_lo, f_hi)
                np.testing.assert_allclose(got, (lo, hi), rtol=1e-6, atol=1e-9)
                words = {"fixed": "fixed 0–1", "shared": "shared by the block's heads", "map": "stretched to this map"}
                assert words[scale] in v.colorbar.axis.labelText and words[scale] in v.info.text()
                assert ("log scale" in v.colorbar.axis.labelText) == log
                tops[(head, scale, log)] = hi
    # stepping through the heads: the shared bar stays, each head's stretched bar is its own
    n = blk.heads_in(1)
    assert len({tops[(h, "shared", False)] for h in range(n)}) == 1
    assert len({round(tops[(h, "map", False)], 6) for h in range(n)}) == n


def test_the_strip_keeps_each_word_on_its_own_stretch(qtbot, real_window):
    """The captioner's strip ("Show, Attend and Tell"): where each word looks, each thumbnail stretched to its own
    peak whatever the scale box says (the strip figure draws it so); the big picture follows the box."""
    w = real_window
    open_and_wait(qtbot, w, CAPTIONER)
    w.select_view("image")
    v = w.image_regions

    def icons():
        return [b.icon().pixmap(64, 64).toImage() for b in v.strip]

    w.session.select(image_scale="map")
    stretched, big = icons(), v.overlay_item.image.copy()
    w.session.select(image_scale="fixed", log=True)
    assert len(stretched) >= 4 and icons() == stretched
    assert not np.array_equal(v.overlay_item.image, big)


def test_image_regions_keeps_a_scale_of_its_own_stretched_by_default(qtbot, real_window):
    """Over an image the default is each map stretched to its own peak (a caption word's weights over 64 patches top
    out near 0.17: on 0–1 the picture is nearly black), while the token maps stay on fixed 0–1: the box shows the
    shown tab's own choice, and a choice made on one tab leaves the other's as it was."""
    w = real_window
    open_and_wait(qtbot, w, CAPTIONER)
    w.select_view("heatmap")
    assert w.controls.scale.currentData() == "fixed" == w.session.sel.scale
    w.select_view("image")
    v = w.image_regions
    assert w.controls.scale.currentData() == "map" == w.session.sel.image_scale
    # the bar's top is the drawn map's own peak: below 1, above the smoothed map's mean
    lo, hi = _bar(v)
    assert lo == 0.0 and float(v.patch_map.mean()) < hi < 1.0 and "stretched to this map" in v.info.text()
    w.controls.scale.setCurrentIndex(w.controls.scale.findData("shared"))
    assert (w.session.sel.image_scale, w.session.sel.scale) == ("shared", "fixed")
    w.select_view("heatmap")
    assert w.controls.scale.currentData() == "fixed"
    w.controls.scale.setCurrentIndex(w.controls.scale.findData("map"))
    assert (w.session.sel.image_scale, w.session.sel.scale) == ("shared", "map")
    w.select_view("image")
    assert w.controls.scale.currentData() == "shared"
