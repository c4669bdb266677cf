"""A speech model's Overview draws every head on one scale whose top is the 99.5th percentile of all thumbnails'
cells, not 0–1 (its rows spread over the clip's frames and never come near 1; the largest weight is the decoder's
first row, always 1).  The top is computed here from the demo's maps with numpy (cut to the clip from the WAV's
header, max-pooled by reshaping) and compared with the window's scale and the figure's colour bar; a top set by
hand still wins."""

from __future__ import annotations

import numpy as np
import pytest
from spoken_demo import demo_and_clip, hand_thumbnails

from attnviz.core import view as vm


@pytest.fixture(scope="module")
def demo():
    return demo_and_clip()


def test_the_speech_overviews_top_is_the_percentile_of_every_thumbnail(demo):
    result, clip = demo
    cells = np.concatenate([t.ravel() for t in hand_thumbnails(result, clip)])
    want = float(np.percentile(cells, 99.5))
    assert want < 0.5 and cells.max() == pytest.approx(1.0)  # the premise: 0–1 and the largest weight are dim
    blocks = result.blocks()
    sel = vm.default_selection(result, blocks)
    thumbs = vm.thumbnails(result, sel, vm.THUMB, blocks)
    for scale in ("fixed", "shared", "map"):  # (0–1 and the largest are both 1 here: every scale box reads alike)
        got = vm.overview_colours(result, blocks, thumbs, scale, False)
        assert got.top == pytest.approx(want, rel=1e-6)
        assert got.label == "attention weight (shared: top at the 99.5th percentile of all heads)"
        assert f"one scale 0–{want:.3g} (the 99.5th percentile" in got.note and "saturate" in got.note
    log = vm.overview_colours(result, blocks, thumbs, "fixed", True)
    assert log.top == pytest.approx(want, rel=1e-6) and log.label.startswith("attention weight (log scale, shared")
    by_hand = vm.overview_colours(result, blocks, thumbs, "fixed", False, 0.5)
    assert by_hand.top == 0.5 and by_hand.label == "attention weight (top 0.5 set by hand)"


def test_the_overview_figure_draws_the_same_top(demo):
    pytest.importorskip("matplotlib")
    from attnviz.figures.spec import FigureStyle
    from attnviz.figures.views import draw_overview

    result, clip = demo
    want = float(np.percentile(np.concatenate([t.ravel() for t in hand_thumbnails(result, clip)]), 99.5))
    fig = draw_overview(result, vm.default_selection(result), FigureStyle(dpi=40))
    panels = [a for a in fig.axes if a.images]
    assert len(panels) == 8 and all(a.images[0].norm.vmax == pytest.approx(want, rel=1e-6) for a in panels)
    assert "99.5th percentile of all heads" in fig.axes[-1].get_ylabel().replace("\n", " ")
