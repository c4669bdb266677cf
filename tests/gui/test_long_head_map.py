"""A map with more positions than the screen has pixels (a crafted 30,000-token ``.npz``: 8 GB held and 33 s to the
window's first paint, the diagonal lost between Qt's samples): the Head map draws it max-pooled, as the figure
does, while the hover still names the real positions and their own weights.  The screen is shrunk to a few dozen
pixels here so that a small map stands for a long one."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gui_helpers import shown_heatmap

from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis

TQ, TK, PEAK = 130, 170, (97, 123)


def _by_hand(m: np.ndarray, fq: int, fk: int) -> np.ndarray:
    """Max over blocks of fq x fk positions, a short last block padded with zeros."""
    pq, pk = math.ceil(m.shape[0] / fq) * fq, math.ceil(m.shape[1] / fk) * fk
    padded = np.zeros((pq, pk), m.dtype)
    padded[: m.shape[0], : m.shape[1]] = m
    return padded.reshape(pq // fq, fq, pk // fk, fk).max(axis=(1, 3))


def _result() -> tuple[AttentionResult, np.ndarray]:
    rng = np.random.default_rng(3)
    m = rng.random((1, 1, TQ, TK), dtype=np.float32) * 0.01
    m[0, 0, PEAK[0], PEAK[1]] = 0.9
    site = SiteInfo("encoder", "cross", 0, 1, "softmax_0", "softmax")
    tokens = TokenAxis([f"q{i}" for i in range(TQ)])
    keys = TokenAxis([f"k{i}" for i in range(TK)])
    return AttentionResult([DenseMap(m)], [site], tokens=tokens, key_tokens=keys), m[0, 0].copy()


@pytest.fixture
def widget(qtbot, monkeypatch):
    return shown_heatmap(qtbot, monkeypatch, 50)  # a 50-pixel screen: 130 x 170 positions are "long"


@pytest.mark.parametrize("log", [False, True])
def test_a_map_longer_than_the_screen_is_drawn_max_pooled_over_its_positions(widget, log):
    result, m = _result()
    mv = vm.head_map(result, vm.Selection(mode="head"))
    widget.set_map(mv, log=log)
    fq, fk = math.ceil(TQ / 50), math.ceil(TK / 50)  # 3 x 4 positions a cell
    pooled = _by_hand(m, fq, fk)
    drawn = widget.image.image
    assert drawn.shape == pooled.shape == (44, 43)
    lo, _ = widget.colorbar.levels()
    # the log of the block's largest weight: log after max, so a zero-padded last block is no brighter than its weights
    want = np.log10(np.maximum(pooled, 10.0**lo)) if log else pooled
    np.testing.assert_allclose(drawn, want, rtol=1e-6)
    # each cell spans its positions: the map still covers positions 0..TK x 0..TQ (the last cells' padding past)
    rect = widget.image.mapRectToParent(widget.image.boundingRect())
    assert (rect.left(), rect.top(), rect.width(), rect.height()) == (0, 0, 43 * fk, 44 * fq)
    assert f"max of {fq} × {fk} positions a cell" in widget.colorbar.axis.labelText


def test_the_hover_over_a_pooled_map_names_the_real_position_and_its_own_weight(widget, qtbot):
    result, m = _result()
    widget.set_map(vm.head_map(result, vm.Selection(mode="head")))
    for r, c in (PEAK, (PEAK[0] + 1, PEAK[1] - 2), (TQ - 1, TK - 1)):
        assert widget.cell_at_scene(widget.scene_pos_of(r, c)) == (r, c)
        widget.set_hover(r, c)
        text = widget.hover_label.text()
        assert f"“q{r}” ({r})" in text and text.endswith(f"({c}): {m[r, c]:.4f}")


def test_a_map_no_longer_than_the_screen_is_drawn_cell_for_cell(widget):
    result, m = _result()
    mv = vm.head_map(result, vm.Selection(mode="head"))
    widget.set_map(mv)
    widget.set_map(vm.head_map(AttentionResult([DenseMap(m[None, None, :40, :50])], result.sites), vm.Selection()))
    np.testing.assert_array_equal(widget.image.image, m[:40, :50])
    assert "positions a cell" not in widget.colorbar.axis.labelText
