"""A long map's thinned token labels say where they sit ("the ·1023"): one token in sixteen labelled, "the" at 1,023
and "the" at 2,311 read alike, and a reader cannot name a window for ``--span LO-HI`` / ``--query``.  The position
is the map's own (as ``--query`` / ``--span`` count), hidden special tokens not moving it; a map whose every
position is labelled keeps its plain tokens."""

from __future__ import annotations

import pytest
from figure_data import LONG_SPECIAL as SPECIAL
from figure_data import long_tokens, text_result

from attnviz.core import view as vm
from attnviz.figures.spec import FigureStyle
from attnviz.figures.views import draw_heatmap


@pytest.fixture(scope="module")
def long_result():
    return text_result(n_layers=1, heads=1, tokens=long_tokens())


def _axes(fig):
    ax = next(a for a in fig.axes if a.images)
    return ax.xaxis, ax.yaxis


def _read(axis) -> tuple[list[int], list[str]]:
    ticks = [int(round(t)) for t in axis.get_majorticklocs()]
    return ticks, [t.get_text().replace("\\$", "$") for t in axis.get_majorticklabels()]


def _stride_rule(n: int, stride: int) -> list[int]:
    """tick_indices' picks by hand: every ``stride``-th from the first, those nearer the last than a stride out,
    and the last."""
    return [i for i in range(0, n, stride) if n - 1 - i >= stride] + [n - 1]


@pytest.mark.parametrize("hide", [True, False])
def test_a_thinned_axis_labels_each_token_with_its_position(long_result, hide):
    toks = long_tokens()
    # the rows' positions by hand: with special tokens hidden, [CLS] at 0 and [SEP] at 500 and 1201 are gone
    positions = [p for p, t in enumerate(toks) if not (hide and t in SPECIAL)]
    labels = [toks[p] for p in positions]
    fig = draw_heatmap(long_result, vm.Selection(hide_special=hide), FigureStyle(dpi=40))
    for axis in _axes(fig):
        ticks, texts = _read(axis)
        n = len(positions)
        stride = ticks[1] - ticks[0]
        assert stride > 1  # thinned (1,200 tokens never fit one a line)
        assert ticks == _stride_rule(n, stride)
        assert texts == [f"{labels[i]} ·{positions[i]}" for i in ticks]
    if hide:  # a row past the hidden [SEP] says its map position, one more than its row (and [CLS]'s)
        ticks, texts = _read(_axes(fig)[1])
        past = next(i for i in ticks if i >= 500)
        assert texts[ticks.index(past)].endswith(f" ·{past + 2}")


def test_every_position_labelled_keeps_the_plain_tokens(text):
    for hide in (False, True):
        mv = vm.head_map(text, vm.Selection(hide_special=hide))
        fig = draw_heatmap(text, vm.Selection(hide_special=hide), FigureStyle(dpi=40))
        for axis, labels in zip(_axes(fig), (mv.k_labels, mv.q_labels)):
            ticks, texts = _read(axis)
            assert ticks == list(range(len(labels)))
            assert texts == list(labels) and not any("·" in t for t in texts)


def test_tick_texts_rule():
    labels, positions = ["a", "b", "c", "d"], [3, 5, 6, 9]
    assert vm.tick_texts(labels, positions, [0, 1, 2, 3], 4) == labels  # all labelled: plain
    assert vm.tick_texts(labels, positions, [0, 3], 4) == ["a ·3", "d ·9"]
    assert vm.tick_texts(labels, None, [0, 3], 4) == ["a", "d"]  # no positions (an axis without them): plain
