"""The window's Head map says a thinned label's position as the figure does (tests/figures/test_positioned_ticks.py):
over 700 px a 1,202-token map labels one token in many, each "the ·1023" (the map's position, hidden special tokens
not moving it); zoomed to 20 positions, every one labelled, the plain tokens."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QRectF
from PySide6.QtGui import QPainter, QPicture

from attnviz.core import view as vm
from tests.figures.figure_data import LONG_SPECIAL, long_tokens, text_result
from tests.gui.gui_helpers import shown_heatmap


def drawn(axis) -> list[str]:
    """The label texts the axis draws at its present range and length (its paint's steps)."""
    picture = QPicture()
    painter = QPainter(picture)
    try:
        _, _, text_specs = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    return [text for _, _, text in text_specs]


@pytest.fixture
def long_map(qtbot, monkeypatch):
    toks = long_tokens()
    hm = shown_heatmap(qtbot, monkeypatch, screen=1024)  # (drawn pooled, as on a screen smaller than the map)
    hm.set_map(vm.head_map(text_result(n_layers=1, heads=1, tokens=toks), vm.Selection(hide_special=True)))
    positions = [p for p, t in enumerate(toks) if t not in LONG_SPECIAL]  # by hand: [CLS] and both [SEP] hidden
    return hm, toks, positions


def test_the_window_s_thinned_labels_say_their_positions(long_map):
    hm, toks, positions = long_map
    for axis in (hm.x_axis, hm.y_axis):
        texts = drawn(axis)
        assert 2 < len(texts) < len(positions) / 4  # thinned
        said = [int(t.rsplit(" ·", 1)[1]) for t in texts]
        assert said[0] == positions[0] and said[-1] == positions[-1]  # the first and the last
        assert all(p in positions for p in said) and said == sorted(said)
        assert texts == [f"{toks[p]} ·{p}" for p in said]  # each its own token at its map position


def test_zoomed_to_every_label_the_window_shows_plain_tokens(long_map, qtbot):
    hm, toks, positions = long_map
    hm.vb.setRange(QRectF(600, 600, 20, 20), padding=0)
    for axis in (hm.x_axis, hm.y_axis):
        axis.picture = None
        texts = drawn(axis)
        assert texts == [toks[p] for p in positions[600:620]]
