"""A map with more positions than the figure has pixels (a crafted 30,000-token ``.npz`` drew for minutes): drawn
max-pooled to the figure's pixels, every peak kept where it lies, and said so on the colour bar."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from figure_data import _axis

from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo
from attnviz.figures import FigureSpec, render_spec
from attnviz.figures.render import figure_bytes
from attnviz.figures.views import MAX_CELLS


def _long(n: int, peak: tuple[int, int] | None = None) -> tuple[AttentionResult, np.ndarray]:
    m = np.full((1, 1, n, n), 1.0 / n, np.float32)
    if peak is not None:
        m[0, 0, peak[0]] = 0.0
        m[0, 0, peak[0], peak[1]] = 1.0
    site = SiteInfo("encoder", "self", 0, 1, "softmax_0", "softmax")
    return AttentionResult([DenseMap(m)], [site], tokens=_axis([f"t{i}" for i in range(n)])), m[0, 0].copy()


def _minor(ax, which: str) -> list[int]:
    """The positions of the small unlabelled ticks (one line of tick markers, layout.minor_ticks)."""
    lines = [a for a in ax.get_children() if a.get_gid() == f"minor-ticks-{which}"]
    return [int(v) for line in lines for v in (line.get_xdata() if which == "x" else line.get_ydata())]


def _by_hand(m: np.ndarray, fq: int, fk: int) -> np.ndarray:
    """Max over blocks of fq x fk positions, a short last block padded with zeros."""
    pq, pk = -(-m.shape[0] // fq) * fq, -(-m.shape[1] // fk) * fk
    padded = np.zeros((pq, pk), m.dtype)
    padded[: m.shape[0], : m.shape[1]] = m
    return padded.reshape(pq // fq, fq, pk // fk, fk).max(axis=(1, 3))


def test_a_map_finer_than_the_figures_pixels_is_max_pooled_keeping_its_peak():
    n, peak = 600, (417, 123)
    result, m = _long(n, peak)
    fig = render_spec(result, FigureSpec(dpi=20))  # ~16 in at 20 dpi: about 300 pixels for 600 positions
    ax = fig.axes[0]
    im = ax.images[0]
    drawn = np.asarray(im.get_array())
    width_px = fig.get_figwidth() * fig.dpi
    assert drawn.shape[0] < n and drawn.shape[1] <= width_px  # not one cell per position
    label = fig.axes[-1].get_ylabel().replace("\n", " ")
    fq, fk = (int(f) for f in re.search(r"max of (\d+) × (\d+) positions a cell", label).groups())
    assert drawn.shape == (math.ceil(n / fq), math.ceil(n / fk))
    np.testing.assert_array_equal(drawn, _by_hand(m, fq, fk))
    # the peak's cell lies over the peak's positions: the axes still count positions (ticks, highlighted row)
    r, c = np.unravel_index(np.argmax(drawn), drawn.shape)
    left, right, bottom, top = im.get_extent()
    assert left + c * (right - left) / drawn.shape[1] <= peak[1] < left + (c + 1) * (right - left) / drawn.shape[1]
    assert top + r * (bottom - top) / drawn.shape[0] <= peak[0] < top + (r + 1) * (bottom - top) / drawn.shape[0]
    assert ax.get_xlim() == (-0.5, n - 0.5) and ax.get_ylim() == (n - 0.5, -0.5)


def test_a_long_map_is_drawn_in_at_most_max_cells_without_a_tick_per_position():
    n = MAX_CELLS + 452
    fig = render_spec(_long(n)[0], FigureSpec(dpi=300))
    ax = fig.axes[0]
    assert max(np.asarray(ax.images[0].get_array()).shape) <= MAX_CELLS
    # 2,500 positions on 16 in: closer than a point, one grey band of ticks (each an object to lay out)
    assert not _minor(ax, "x") and not _minor(ax, "y")


def test_a_short_map_is_drawn_cell_for_cell_with_a_tick_per_position():
    n = 300
    result, m = _long(n, (5, 7))
    fig = render_spec(result, FigureSpec(dpi=300))
    ax = fig.axes[0]
    np.testing.assert_array_equal(ax.images[0].get_array(), m)
    ticked = {*_minor(ax, "x"), *ax.xaxis.get_majorticklocs()}
    assert ticked == set(range(n)) and len(ax.xaxis.get_majorticklocs()) < n  # thinned labels, every position ticked
    assert "max of" not in fig.axes[-1].get_ylabel()


def test_a_signed_map_keeps_each_blocks_largest_magnitude_with_its_sign():
    m = np.zeros((4, 6), np.float32)
    m[0, 0], m[1, 1] = 0.2, -0.5  # one block: the negative one is larger
    m[2, 4], m[3, 5] = 0.7, -0.1
    pooled, fq, fk = vm.pool_to(m, 2, 3, signed=True)
    assert (fq, fk) == (2, 2)
    np.testing.assert_array_equal(pooled, np.array([[-0.5, 0, 0], [0, 0, 0.7]], np.float32))


def test_every_unlabelled_position_of_a_300_token_map_has_its_tick_in_the_file(tmp_path):
    # drawn as one line of tick markers (2,000 tick objects took 13 s of a 1,000-token figure's 19): in the SVG a
    # <use> of one 1 pt tick per position, at the cells' pitch, labelled positions excepted
    n = 300
    result, _ = _long(n)
    fig = render_spec(result, FigureSpec(dpi=300))
    labelled = {int(v) for v in fig.axes[0].xaxis.get_majorticklocs()}
    out = tmp_path / "map.svg"
    out.write_bytes(figure_bytes(fig, "svg"))
    svg = out.read_text()
    group = svg[svg.index('id="minor-ticks-x"') :]
    group = group[: group.index("</g>\n   </g>")]
    xs = [float(x) for x in re.findall(r'<use xlink:href="#\w+" x="([\d.]+)"', group)]
    assert len(xs) == n - len(labelled) and 0 < len(labelled) < n  # labels thinned, the rest ticked
    pitch = (max(xs) - min(xs)) / (max(set(range(n)) - labelled) - min(set(range(n)) - labelled))
    by_position = dict(zip(sorted(set(range(n)) - labelled), sorted(xs)))
    for i, x in by_position.items():  # each tick at its position: evenly spaced a cell apart
        assert x == pytest.approx(min(xs) + (i - min(by_position)) * pitch, abs=0.01)
