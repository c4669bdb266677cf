"""Token links on a long causal map: each query token shows its strongest links (the "row" cut, the default), or,
chosen in the window's "links against" box, the links of at least 5 % of the map's top weight ("map", as before).

A random-init language model's causal map spreads row ``i`` over ``i`` keys, so against the map's top (row 0's
weight of 1) the rows past a few dozen had no links at all.  The links the window draws are checked against a
numpy computation on the same map, row by row; the exported figure draws the same lines (rows, keys and shades),
and its recipe records the cut, so ``attnviz figure --recipe`` draws them again."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from screen_figure import check_links, figure

from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
from attnviz.core.view import link_alpha
from attnviz.figures.from_selection import spec_of

T = 400


def _result() -> AttentionResult:
    """Two layers of two heads, causal and near-flat, as a random-init GPT-2's (softmax of small logits)."""
    rng = np.random.default_rng(27)
    x = rng.standard_normal((1, 2, T, T)).astype(np.float32) * 0.3
    x[..., np.triu(np.ones((T, T), bool), 1)] = -np.inf
    maps = []
    for _ in range(2):
        m = np.exp(x - x.max(-1, keepdims=True))
        maps.append(DenseMap(m / m.sum(-1, keepdims=True)))
        x = x[:, ::-1].copy()
    sites = [SiteInfo("decoder", "self", i, 2, f"/h.{i}/attn/Softmax", "softmax") for i in range(2)]
    return AttentionResult(maps, sites, tokens=TokenAxis([f"w{i}" for i in range(T)]), info={"model": "gpt"})


def _by_hand(m: np.ndarray, cut: str) -> list[tuple[int, int, float]]:
    """(row, key, shade): each row's 12 largest weights (a stable sort: equal ones leftmost), those of at least 5 %
    of the row's largest ("row") or of the map's largest ("map"), shaded by the row's share or the weight over
    the map's largest."""
    m = m.astype(np.float64)
    out = []
    for i, row in enumerate(m):
        ref, shade = (row.max(), row.sum()) if cut == "row" else (m.max(), m.max())
        for j in sorted(np.argsort(-row, kind="stable")[:12].tolist()):
            if row[j] / ref >= 0.05:
                out.append((i, j, min(row[j] / shade, 1.0)))
    return out


def _drawn(canvas) -> list[tuple[int, int, float]]:
    return [(i, j, w) for _, i, j, w in canvas.links]


def _lines(fig) -> list[tuple[int, int, float]]:
    """The figure's lines as (query row, key row, opacity): one head, the columns the same length (y = the row)."""
    from matplotlib.collections import LineCollection

    out = []
    for coll in fig.axes[0].collections:
        if isinstance(coll, LineCollection):
            for seg, colour in zip(coll.get_segments(), coll.get_colors()):
                out.append((int(round(seg[0][1])), int(round(seg[1][1])), float(colour[3])))
    return sorted(out)


@pytest.mark.parametrize("cut", ["row", "map"])
def test_the_window_draws_each_cuts_links_and_the_figure_the_same(qtbot, window, cut):
    w, result = window, _result()
    w._show_result(result)
    w.select_view("links")
    w.session.select(mode="head", layer=1, head=1, heads=())
    v = w.links
    assert w.session.sel.link_cut == "row" and v.cut_box.currentData() == "row"  # the default
    v.cut_box.setCurrentIndex(v.cut_box.findData(cut))  # the box, as the user picks
    assert w.session.sel.link_cut == cut
    m = result.maps[1].array()[0, 1]
    want = _by_hand(m, cut)
    got = _drawn(v.canvas)
    assert [lk[:2] for lk in got] == [lk[:2] for lk in want]
    np.testing.assert_allclose([lk[2] for lk in got], [lk[2] for lk in want], rtol=1e-6)
    rows = {i for i, _, _ in got}
    if cut == "row":  # every token has its links, however far down
        assert rows == set(range(T)) and len(got) == sum(min(i + 1, 12) for i in range(T))
    else:  # the map's top is row 0's weight of 1: past a few dozen rows nothing reaches 5 % of it
        assert max(rows) < 64
    fig = figure(w, v)
    check_links(w, fig)
    drawn, shaded = _lines(fig), sorted((i, j, link_alpha(s)) for i, j, s in got)
    assert [lk[:2] for lk in drawn] == [lk[:2] for lk in shaded]  # (pytest 9.2's approx takes no nested tuples)
    np.testing.assert_allclose([lk[2] for lk in drawn], [lk[2] for lk in shaded], atol=1e-6)
    spec = spec_of(result, "links", w.figure_selection(v)[1])
    assert spec.link_cut == cut  # the recipe says which cut: `figure --recipe` draws these links again


def test_the_cut_stays_across_head_switches_and_a_new_result(qtbot, window):
    w = window
    w._show_result(_result())
    w.select_view("links")
    w.links.cut_box.setCurrentIndex(w.links.cut_box.findData("map"))
    w.session.select(head=0)
    assert w.links.cut_box.currentData() == "map" and w.links.lv.cut == "map"
    w.session.select(link_cut="row")  # the selection (a restored session) shows in the box
    assert w.links.cut_box.currentData() == "row" and w.links.lv.cut == "row"
    assert "its query token's strongest" in w.links.info.toolTip()
    w._show_result(_result())  # another input: the user's cut stays
    assert w.session.sel.link_cut == "row"


def test_open_link_cut_flag_selects_the_cut(qtbot, window):
    from attnviz.cli import build_parser
    from attnviz.gui.command import focus_from_args

    w = window
    w._show_result(_result())
    w.select_view("links")
    args = build_parser().parse_args(["open", "m.onnx", "--view", "links", "--link-cut", "map"])
    w.session.select(**focus_from_args(args))
    assert w.links.cut_box.currentData() == "map" and {i for _, i, _, _ in w.links.canvas.links} <= set(range(64))


def test_a_new_result_draws_the_shown_views_once(qtbot, window, monkeypatch):
    """Session.set_result sends result_changed, then selection_changed: the shown view drew on both, so Token
    links computed its links twice a result (1.8 s each at 4,096 tokens on demand, every map recomputed)."""
    import attnviz.gui.views.token_links as token_links

    w = window
    w._show_result(_result())
    w.select_view("links")
    calls = []
    real = token_links.vm.links_view
    monkeypatch.setattr(token_links.vm, "links_view", lambda *a, **k: calls.append(1) or real(*a, **k))
    w._show_result(_result())
    assert len(calls) == 1 and w.links.lv is not None and w.links.canvas.links
    w.select_view("head")
    drawn = []
    monkeypatch.setattr(w.head_map, "draw", lambda: drawn.append(1))
    w._show_result(_result())
    assert len(drawn) == 1
    w.select_view("links")  # the hidden tab drew nothing for that result: it draws it once, shown
    assert len(calls) == 2
