"""The colour scale of a window of a long causal map (``figure --span`` / ``--key-span``): on "map" its top is the
drawn cells' largest weight, on "shared" the largest any head of the block gives in the window -- not the whole
map's, which on a causal map is row 0's 1.0 (the first query sees only itself) and left a window 1,000 positions on
(weights near 1/1,000) black.  Tops are computed by hand with numpy from the maps; the colour bar's range and words
are read from the matplotlib artists, and the figure's pixels in the window are looked at."""

from __future__ import annotations

import numpy as np
import pytest
from figure_data import _axis

from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo
from attnviz.core.view import LOG_DECADES, MAP_CMAP
from attnviz.figures import FigureSpec, render_spec

N, LO, HI = 1128, 1000, 1127  # the window long30 found black: queries 1,000-1,127 of a causal text


def _near_uniform(rng, heads: int) -> np.ndarray:
    """Causal maps as a random-init model's are: near uniform over the keys a row may see (1/(i+1) at row i)."""
    logits = rng.normal(0, 0.3, size=(1, heads, N, N)).astype(np.float32)
    logits[..., np.triu(np.ones((N, N), bool), 1)] = -np.inf
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.fixture(scope="module")
def causal():
    """A causal 2-layer, 2-head self-attention result of N tokens (row 0 all on itself: weight 1.0)."""
    rng = np.random.default_rng(30)
    maps = [DenseMap(_near_uniform(rng, 2)) for _ in range(2)]
    sites = [SiteInfo("decoder", "self", i, 2, f"s{i}", "softmax") for i in range(2)]
    return AttentionResult(maps, sites, tokens=_axis([f"w{i}" for i in range(N)]))


def _bar(fig):
    """The map's norm (its colour range) and the colour bar's label."""
    image = fig.axes[0].images[0]
    cbar = image.colorbar
    return image.norm, cbar.ax.get_ylabel() or cbar.ax.get_xlabel()


def test_a_window_on_the_map_scale_is_stretched_to_its_own_cells(causal):
    m = causal.maps[1].head(0, 1)
    assert m[0, 0] == pytest.approx(1.0)  # the whole map's top, far from the window
    fig = render_spec(causal, FigureSpec(view="heatmap", layer=1, head=1, span=[LO, HI], scale="map"))
    norm, words = _bar(fig)
    want = float(m[LO : HI + 1, LO : HI + 1].max())
    assert want < 0.01  # (what the window's weights are: a 1.0 top painted them all near the bottom colour)
    assert norm.vmax == pytest.approx(want, rel=1e-6) and norm.vmin == 0
    assert "stretched to the drawn span" in words.replace("\n", " ")
    # the figure's pixels inside the map: most are not the bottom colour any more
    fig.set_dpi(60)
    fig.canvas.draw()
    rgb = np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(int)
    box = fig.axes[0].get_window_extent()
    h = rgb.shape[0]
    inside = rgb[int(h - box.y1) + 2 : int(h - box.y0) - 2, int(box.x0) + 2 : int(box.x1) - 2]
    import matplotlib

    bottom = np.round(np.asarray(matplotlib.colormaps[MAP_CMAP](0.0)[:3]) * 255)
    near_bottom = (np.abs(inside - bottom).max(-1) <= 12).mean()
    upper = np.triu(np.ones((HI - LO + 1,) * 2, bool), 1).mean()  # the causal mask's zeros: bottom colour rightly
    assert near_bottom < upper + 0.25, near_bottom


def test_a_key_window_and_the_log_scale_take_the_drawn_cells_top(causal):
    m = causal.maps[0].head(0, 0)
    fig = render_spec(
        causal, FigureSpec(view="heatmap", layer=0, head=0, span=[LO, HI], key_span=[LO - 64, LO + 63], scale="map")
    )
    want = float(m[LO : HI + 1, LO - 64 : LO + 64].max())
    norm, _ = _bar(fig)
    assert norm.vmax == pytest.approx(want, rel=1e-6)
    fig = render_spec(causal, FigureSpec(view="heatmap", layer=0, head=0, span=[LO, HI], scale="map", log=True))
    norm, words = _bar(fig)
    top = float(m[LO : HI + 1, LO : HI + 1].max())
    assert (norm.vmin, norm.vmax) == pytest.approx((top * 10.0**-LOG_DECADES, top), rel=1e-6)
    assert "log scale" in words and "drawn span" in words.replace("\n", " ")


def test_a_window_on_the_shared_scale_takes_every_head_of_the_block_in_the_window(causal):
    fig = render_spec(causal, FigureSpec(view="heatmap", layer=0, head=1, span=[LO, HI], scale="shared"))
    want = max(float(causal.maps[i].head(0, h)[LO : HI + 1, LO : HI + 1].max()) for i in range(2) for h in range(2))
    norm, words = _bar(fig)
    assert norm.vmax == pytest.approx(want, rel=1e-6)
    assert "shared by the block's heads in the drawn span" in words.replace("\n", " ")
    # an aggregate's window: still the heads' top (each head's cells, not the mean's)
    fig = render_spec(causal, FigureSpec(view="heatmap", agg="mean", layer=1, span=[LO, HI], scale="shared"))
    assert _bar(fig)[0].vmax == pytest.approx(want, rel=1e-6)


def test_fixed_and_hand_tops_and_the_whole_map_are_as_before(causal):
    m = causal.maps[0].head(0, 0)
    norm, words = _bar(render_spec(causal, FigureSpec(view="heatmap", layer=0, head=0, span=[LO, HI], scale="fixed")))
    assert norm.vmax == 1.0 and "fixed 0–1" in words
    spec = FigureSpec(view="heatmap", layer=0, head=0, span=[LO, HI], scale="map", vmax=0.05)
    norm, words = _bar(render_spec(causal, spec))
    assert norm.vmax == 0.05 and "top 0.05 set by hand" in words
    norm, words = _bar(render_spec(causal, FigureSpec(view="heatmap", layer=0, head=0, scale="map")))
    assert norm.vmax == pytest.approx(float(m.max())) and "stretched to this map" in words


def _rows_over_max(m: np.ndarray) -> np.ndarray:
    tops = m.max(axis=1, keepdims=True)
    return np.where(tops > 0, m / np.where(tops > 0, tops, 1), 0).astype(np.float32)


def test_the_row_scale_draws_each_row_over_its_own_maximum(causal):
    """--scale row: each query row divided by its largest weight (over all the keys it sees, in a window too, so a
    zoomed view and its export divide alike), 0-1 on the colour bar, which says so; a top by hand: the weights."""
    m = causal.maps[0].head(0, 1)
    fig = render_spec(causal, FigureSpec(view="heatmap", layer=0, head=1, scale="row"))
    image = fig.axes[0].images[0]
    np.testing.assert_allclose(np.asarray(image.get_array()), _rows_over_max(m), rtol=1e-6)
    assert (image.norm.vmin, image.norm.vmax) == (0, 1)
    assert "each row stretched to its maximum" in _bar(fig)[1].replace("\n", " ")
    fig = render_spec(causal, FigureSpec(view="heatmap", layer=0, head=1, scale="row", span=[LO, HI]))
    window = _rows_over_max(m)[LO : HI + 1, LO : HI + 1]  # (the row's top may lie left of the window: key 3)
    np.testing.assert_allclose(np.asarray(fig.axes[0].images[0].get_array()), window, rtol=1e-6)
    assert float(np.median(window[np.tril_indices(len(window))])) > 0.2  # near-uniform rows: lit, not black (~0.001)
    fig = render_spec(causal, FigureSpec(view="heatmap", layer=0, head=1, scale="row", span=[LO, HI], vmax=0.01))
    np.testing.assert_array_equal(np.asarray(fig.axes[0].images[0].get_array()), m[LO : HI + 1, LO : HI + 1])
    assert "top 0.01 set by hand" in _bar(fig)[1]


def test_an_image_overlay_on_the_row_scale_is_stretched_to_its_peak_and_says_so():
    """An overlay is one query's row: "row" stretches it to its own peak, as "map" does, in the map's words."""
    from attnviz.core.view import heat_scale

    row, stretched = heat_scale("row", False, 0.3, lambda: 0.9), heat_scale("map", False, 0.3, lambda: 0.9)
    assert (row.vmin, row.vmax, row.label) == (stretched.vmin, stretched.vmax, stretched.label)
    assert row.vmax == 0.3 and "stretched to this map" in row.label
