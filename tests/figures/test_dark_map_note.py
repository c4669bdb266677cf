"""A map drawn almost wholly in its scale's bottom colour says so, and which scale shows it (core/view/dark.py).

A 2,000-token causal map on 0–1 is a black square: row i's weights are near 1/i, the top is row 0's 1.0.  The
share of dark cells is counted here by hand from the map's numbers; the note is said by ``figure`` and shown above
the window's Head map, and not for a map that is readable (the row scale, a map of strong weights, a small map)."""

from __future__ import annotations

import math

import numpy as np
from figure_data import _axis

from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo
from attnviz.figures.spec import FigureStyle
from attnviz.figures.views import draw_heatmap, figure_notes

N = 300  # positions: 90,000 cells, past DARK_MIN_CELLS


def causal_uniform(n: int = N, heads: int = 2) -> AttentionResult:
    """Each query row spread evenly over the keys it may see: row i's weights are 1/(i + 1)."""
    rows = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    maps = [DenseMap(np.broadcast_to(rows, (1, heads, n, n)).astype(np.float32).copy())]
    sites = [SiteInfo("decoder", "self", 0, heads, "softmax_0", "softmax")]
    return AttentionResult(maps, sites, tokens=_axis([f"w{i}" for i in range(n)]), info={"model": "/m/gpt.onnx"})


def hand_share(n: int = N, level: float = 0.05) -> float:
    """The share of the map's weight in cells below ``level``: each row holds 1 in all; row i's cells are 1/(i+1),
    so the rows with 1/(i+1) < level hold theirs wholly in dark cells."""
    return sum(1 for i in range(n) if 1 / (i + 1) < level) / n


def test_a_dark_map_is_said_with_its_share_and_the_scale_that_shows_it():
    result = causal_uniform()
    sel = vm.Selection(block=0, layer=0, head=0, mode="head")
    mv = vm.head_map(result, sel)
    note = vm.dark_note(mv, log=False)
    share = hand_share()
    assert share >= 0.9  # the premise: 90 % of the weight in cells under 5 % of the top (core/view/dark.py's bounds)
    assert note is not None and note.startswith(
        f"{math.floor(share * 1000) / 10:g}% of this map's attention weight is in cells below 0.05"
    )
    assert "--scale row" in note
    # the figure says it (figure_notes: `figure` prints them), in the command line's words
    fig = draw_heatmap(result, sel, FigureStyle())
    assert figure_notes(fig) == [note]


def test_no_note_where_the_map_reads():
    result = causal_uniform()
    sel = vm.Selection(block=0, layer=0, head=0, mode="head")
    mv = vm.head_map(result, sel)
    assert vm.dark_note(mv, log=True) is None  # the log scale is the user's choice of how to see it
    row = vm.head_map(result, vm.Selection(block=0, layer=0, head=0, mode="head", scale="row"))
    assert vm.dark_note(row, log=False) is None  # each row on its own top: nothing dark to say
    small = vm.head_map(causal_uniform(n=40), sel)
    assert vm.dark_note(small, log=False) is None  # 1,600 cells: its few bright cells are seen
    sharp = causal_uniform()  # every row on one key (an identity map): 1/n of the cells at 1.0, the rest 0
    sharp.maps[0].array()[:] = np.eye(N, dtype=np.float32)
    assert vm.dark_note(vm.head_map(sharp, sel), log=False) is None  # 99.7 % of its cells are 0, its weight on 1.0
    half = causal_uniform()
    half.maps[0].array()[:] = 0.5
    assert vm.dark_note(vm.head_map(half, sel), log=False) is None
    fig = draw_heatmap(half, sel, FigureStyle())
    assert figure_notes(fig) == []


def test_the_window_shows_it_above_the_head_map_in_its_own_words(qtbot):
    from attnviz.gui.session import Session
    from attnviz.gui.views.head_map import HeadMapView

    session = Session()
    view = HeadMapView(session)
    qtbot.addWidget(view)
    view.show()
    qtbot.waitExposed(view)
    session.set_result(causal_uniform())  # on screen: it builds and draws
    text = view.dark_label.text()
    assert view.dark_label.isVisible() and "of this map's attention weight is in cells below 0.05" in text
    assert "--" not in text and "each row stretched to its maximum" in text  # the window's box, no flag
    session.select(scale="row")
    assert not view.dark_label.isVisible()


def test_a_long_map_is_read_in_whole_rows_and_its_share_stays_the_maps():
    """Past SAMPLED_CELLS the note reads evenly spaced whole rows (a head switch at 4,096 tokens scanned 16 M cells):
    the share said stays within a point of the whole map's, counted by hand, and a previous-token map (its weight
    one cell off the diagonal, which a strided grid of cells would miss) reads as the bright line it is."""
    n = 700  # 490,000 cells: every other row read
    assert n * n > vm.dark.SAMPLED_CELLS
    sel = vm.Selection(block=0, layer=0, head=0, mode="head")
    note = vm.dark_note(vm.head_map(causal_uniform(n=n), sel), log=False)
    assert note is not None
    said = float(note.split("%")[0])
    assert abs(said - 100 * hand_share(n)) < 1.0, (said, hand_share(n))
    shifted = causal_uniform(n=n)
    shifted.maps[0].array()[:] = (
        np.eye(n, k=-1, dtype=np.float32) + np.eye(n, k=0, dtype=np.float32) * (np.arange(n) == 0)[:, None]
    )
    assert vm.dark_note(vm.head_map(shifted, sel), log=False) is None
