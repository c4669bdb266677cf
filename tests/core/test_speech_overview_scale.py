"""A speech model's Overview draws each block (encoder self-attention, decoder self-attention, cross-attention) on a
scale of its own, topped at the 99.5th percentile of that block's thumbnails' cells: one top over every block was
the encoder's (its cells outnumber the decoder's), and saturated every decoder self-attention row.  Each top is
computed here from the demo's maps with numpy (cut to the clip from the WAV's header, max-pooled by reshaping) and
compared with the view model's and the figure's colour bar; a top set by hand, or a scale chosen (Selection
.kind_scale False), still wins."""

from __future__ import annotations

import numpy as np
import pytest
from spoken_demo import demo_and_clip, hand_map_thumbnails

from attnviz.core import view as vm


@pytest.fixture(scope="module")
def demo():
    result, clip = demo_and_clip()
    per_map = hand_map_thumbnails(result, clip)
    blocks = result.blocks()
    cells = {bi: np.concatenate([t.ravel() for i in b.sites for t in per_map[i]]) for bi, b in enumerate(blocks)}
    return result, blocks, cells


def hand_tops(cells: dict) -> dict:
    return {bi: float(np.percentile(c, 99.5)) for bi, c in cells.items()}


def test_each_block_of_a_speech_overview_has_its_own_top(demo):
    result, blocks, cells = demo
    want = hand_tops(cells)
    names = [b.name for b in blocks]
    dec = names.index("decoder self-attention")
    # the premise: one top over every block (speech30's) saturated a third of the decoder's attended cells
    pooled = float(np.percentile(np.concatenate(list(cells.values())), 99.5))
    attended = cells[dec][cells[dec] > 0]
    assert np.mean(attended > pooled) > 0.3 and np.mean(attended > want[dec]) < 0.05
    thumbs = vm.thumbnails(result, vm.default_selection(result, blocks), vm.THUMB, blocks)
    for scale in ("fixed", "shared", "map"):  # the kind's own scale, whichever scale the box holds
        got = vm.overview_colours(result, blocks, thumbs, scale, False)
        assert got.per_block and set(got.tops) == set(want)
        for bi, top in want.items():
            assert got.top_of(bi) == pytest.approx(top, rel=1e-6), names[bi]
        assert got.label == "attention weight (this block's: top at the 99.5th percentile of its heads)"
        assert got.note.startswith("a scale per block (the 99.5th percentile of its heads' cells; brighter saturate)")
        assert got.note.endswith(": " + ", ".join(f"{names[bi]} 0–{want[bi]:.3g}" for bi in sorted(want)))
        assert got.box_words == "per block: 99.5th percentile"
    log = vm.overview_colours(result, blocks, thumbs, "fixed", True)
    assert log.top_of(dec) == pytest.approx(want[dec], rel=1e-6) and log.label.startswith(
        "attention weight (log scale, this block's"
    )
    # a top set by hand, and a scale chosen in the box or by --scale, win: one scale over every block again
    by_hand = vm.overview_colours(result, blocks, thumbs, "fixed", False, 0.5)
    assert not by_hand.per_block and [by_hand.top_of(bi) for bi in want] == [0.5] * len(want)
    assert by_hand.label == "attention weight (top 0.5 set by hand)" and by_hand.box_words is None
    chosen = vm.overview_colours(result, blocks, thumbs, "fixed", False, kind_scale=False)
    assert not chosen.per_block and chosen.top == 1.0 and chosen.label == "attention weight (fixed 0–1)"


def test_the_overview_figure_draws_its_blocks_top(demo):
    pytest.importorskip("matplotlib")
    from attnviz.figures.spec import FigureStyle
    from attnviz.figures.views import draw_overview

    result, blocks, cells = demo
    want = hand_tops(cells)
    sel = vm.default_selection(result)
    for bi in sorted(want):
        fig = draw_overview(result, sel.with_(block=bi), FigureStyle(dpi=40))
        panels = [a for a in fig.axes if a.images]
        assert len(panels) == 8 and all(a.images[0].norm.vmax == pytest.approx(want[bi], rel=1e-6) for a in panels)
        bar = fig.axes[-1]  # the colour bar's axes: its range, read from the artist
        assert bar.get_ylim() == pytest.approx((0.0, want[bi]), rel=1e-6), blocks[bi].name
        assert "99.5th percentile of its heads" in bar.get_ylabel().replace("\n", " ")
    chosen = draw_overview(result, sel.with_(kind_scale=False), FigureStyle(dpi=40))
    assert chosen.axes[-1].get_ylim() == pytest.approx((0.0, 1.0)) and "fixed 0–1" in chosen.axes[-1].get_ylabel()
