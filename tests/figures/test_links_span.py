"""``attnviz figure --view links`` past a few hundred tokens (links30).  With ``--span LO-HI`` (``--key-span``) the two
token columns are the window's tokens and the lines the links the whole view draws between them (each token's
strongest of its whole row, shaded by its share of the whole row), checked line by line against a numpy
computation of each row's links; without a span a long input's page is capped at the heatmap's height and each
token keeps its strongest few links (``LINKS_PER_PAGE``), counted by hand, and ``figure`` says so in one note."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from figure_data import encdec_result
from matplotlib.collections import LineCollection

from attnviz.cli import main
from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
from attnviz.core.io import save_npz
from attnviz.core.view import link_alpha
from attnviz.figures import FigureSpec, render_spec


def _causal(t: int, seed: int = 30) -> AttentionResult:
    """A causal language model's map: a previous-token head with a sink on token 0 over near-flat noise."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, 1, t, t)).astype(np.float32) * 0.3
    at = np.arange(1, t)
    x[..., at, at - 1] += 4.0
    x[..., :, 0] += 3.0
    x[..., np.triu(np.ones((t, t), bool), 1)] = -np.inf
    m = np.exp(x - x.max(-1, keepdims=True))
    m = (m / m.sum(-1, keepdims=True)).astype(np.float32)
    sites = [SiteInfo("decoder", "self", 0, 1, "softmax_0", "softmax")]
    return AttentionResult([DenseMap(m)], sites, tokens=TokenAxis([f"w{i}" for i in range(t)]))


def _links_by_hand(m: np.ndarray, per_row: int = 12) -> list[tuple[int, int, float]]:
    """(row, key, shade) of the "row" cut: each row's 12 largest weights (equal ones leftmost) of at least 5 % of
    the row's largest, shaded by the weight's share of the row; of them the row's ``per_row`` largest."""
    m = m.astype(np.float64)
    out = []
    for i, row in enumerate(m):
        top = [j for j in np.argsort(-row, kind="stable")[:12].tolist() if row[j] / row.max() >= 0.05]
        out.extend((i, j, row[j] / row.sum()) for j in sorted(top[:per_row]))
    return out


def _drawn(fig) -> list[tuple[str, str, float]]:
    """Each line as (the query label at its left end, the key label at its right end, opacity): the labels are
    the axes' texts at the line's ends' heights, so a line is named by the tokens it joins on the page."""
    labels = [t for t in fig.axes[0].texts if t.get_style() != "italic"]  # (the columns' titles are italic)
    left = {round(t.get_position()[1], 6): t.get_text() for t in labels if t.get_ha() == "right"}
    right = {round(t.get_position()[1], 6): t.get_text() for t in labels if t.get_ha() == "left"}
    return sorted(
        (left[round(seg[0][1], 6)], right[round(seg[1][1], 6)], float(colour[3]))
        for coll in fig.axes[0].collections
        if isinstance(coll, LineCollection)
        for seg, colour in zip(coll.get_segments(), coll.get_colors())
    )


def _key(fig) -> str:
    return " ".join(t.get_text() for t in fig.texts).replace("\n", " ")


@pytest.fixture(scope="module")
def long_map():
    r = _causal(700)
    return r, r.maps[0].array()[0, 0]


def test_a_window_draws_its_tokens_and_the_links_between_them(long_map):
    r, m = long_map
    fig = render_spec(r, FigureSpec(view="links", head=0, link_cut="row", span=[300, 339], key_span=[280, 339]))
    ax = fig.axes[0]
    queries = [t.get_text() for t in ax.texts if t.get_ha() == "right" and t.get_text() != "query"]
    keys = [t.get_text() for t in ax.texts if t.get_ha() == "left" and t.get_text() != "key"]
    assert queries == [f"w{i}" for i in range(300, 340)] and keys == [f"w{j}" for j in range(280, 340)]
    whole = _links_by_hand(m)
    want = sorted((f"w{i}", f"w{j}", link_alpha(w)) for i, j, w in whole if 300 <= i <= 339 and 280 <= j <= 339)
    drawn = _drawn(fig)
    assert [d[:2] for d in drawn] == [w[:2] for w in want]  # the line's ends: exactly the window's positions
    np.testing.assert_allclose([d[2] for d in drawn], [w[2] for w in want], atol=1e-6)
    assert ("w339", "w338") in {d[:2] for d in drawn}  # the previous-token head's links are there
    outside = sum(1 for i, j, _ in whole if 300 <= i <= 339 and not 280 <= j <= 339)
    assert outside >= 40  # every row's sink link to token 0 among them
    assert f"{outside} links to keys outside the window: not drawn" in _key(fig)
    title = _key(fig)
    assert "query 300–339" in title and "key 280–339" in title


def test_a_self_attention_window_cuts_the_keys_with_the_queries(long_map):
    r, m = long_map
    fig = render_spec(r, FigureSpec(view="links", head=0, link_cut="row", span=[650, 10**6]))
    drawn = _drawn(fig)
    want = sorted((f"w{i}", f"w{j}") for i, j, _ in _links_by_hand(m) if i >= 650 and j >= 650)
    assert [d[:2] for d in drawn] == want
    assert "positions 650–699" in _key(fig) and str(10**6) not in _key(fig)


def _mediabox_in(pdf: bytes) -> tuple[float, float]:
    w, h = re.search(rb"/MediaBox\s*\[\s*0\s+0\s+([\d.]+)\s+([\d.]+)\s*\]", pdf).groups()
    return float(w) / 72, float(h) / 72


def test_a_long_page_is_capped_and_keeps_each_tokens_strongest_links(tmp_path, capsys):
    t = 2000
    r = _causal(t, seed=31)
    m = r.maps[0].array()[0, 0]
    maps = save_npz(r, tmp_path / "long.npz")
    out = tmp_path / "links.pdf"
    common = ["figure", "--maps", str(maps), "--view", "links", "--head", "0", "--dpi", "20"]
    assert main([*common, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert _mediabox_in(out.read_bytes())[1] == pytest.approx(16.0, abs=0.01)  # was 22 in: a solid blob
    # 6,144 lines a page: each of 2,000 tokens keeps its 3 strongest (12 each were 24,000 lines)
    per_row = 3
    fig = render_spec(r, FigureSpec(view="links", head=0, link_cut="row"))
    lines = [
        (int(round(seg[0][1])), int(round(seg[1][1])))
        for coll in fig.axes[0].collections
        if isinstance(coll, LineCollection)
        for seg in coll.get_segments()
    ]
    want = _links_by_hand(m, per_row)
    assert sorted(lines) == [(i, j) for i, j, _ in want]  # (one head: a line's ends are its rows)
    assert len({i for i, _ in lines}) == t  # every token keeps its link
    assert "past its 3 strongest: not drawn" in _key(fig)
    # rows 0.5 pt apart: lines a tenth as wide (0.2 + 2 w pt each before: the page inked solid)
    widths = [float(lw) for coll in fig.axes[0].collections for lw in coll.get_linewidths()]
    assert max(widths) <= 0.1 * (0.2 + 2.0) + 1e-9 and min(widths) >= 0.1 * 0.2 - 1e-9
    note = [line for line in err.splitlines() if "query tokens on one page" in line]
    assert len(note) == 1 and "2,000 query tokens" in note[0] and "its 3 strongest links" in note[0]
    assert "--span LO-HI" in note[0]
    single = render_spec(r, FigureSpec(view="links", head=0, width="single")).get_size_inches()
    assert tuple(single) == pytest.approx((3.5, 10.0))  # a column's width: the heatmap's 10 in
    capsys.readouterr()
    window = tmp_path / "window.pdf"
    assert main([*common, "--span", "1000-1063", "--out", str(window)]) == 0
    assert "query tokens on one page" not in capsys.readouterr().err  # a window draws all its links


def test_a_cross_attention_window_keeps_every_source_token_unless_asked():
    r = encdec_result()
    m = r.maps[5].head(0, 0)
    spec = {"view": "links", "block": "decoder cross", "layer": 1, "head": 0, "link_cut": "row"}
    whole = _links_by_hand(m)
    src, tgt = r.tokens.labels, r.key_tokens.labels
    for key_span, keys in ((None, range(len(src))), ([1, 3], range(1, 4))):
        fig = render_spec(r, FigureSpec(**spec, span=[2, 4], key_span=key_span))
        labels = [t for t in fig.axes[0].texts if t.get_style() != "italic"]
        assert [t.get_text() for t in labels if t.get_ha() == "left"] == [src[j] for j in keys]
        want = sorted((tgt[i], src[j]) for i, j, _ in whole if 2 <= i <= 4 and j in keys)
        assert [d[:2] for d in _drawn(fig)] == want
