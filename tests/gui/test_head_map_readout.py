"""A zoomed Head map's read-out names a key in view: a found row (the find box zooms a long map to FIND_SPAN rows
around it) is read out with its strongest key among those shown, as hovering it would, and a hover names the cell
under the cursor.  On a causal map with a sink (key 0 holds half of every row) the row's strongest of all keys
was the sink, far outside the keys in view: the read-out named key 0 while the view showed keys 284..315."""

from __future__ import annotations

import re

import numpy as np

from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
from attnviz.gui.views.heatmap import FIND_SPAN

T = 400


def _sink_result(t: int = T) -> AttentionResult:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 1, t, t)) * 0.5
    x[..., np.triu(np.ones((t, t), bool), 1)] = -np.inf
    m = np.exp(x - x.max(-1, keepdims=True))
    m /= m.sum(-1, keepdims=True)
    m = 0.5 * m
    m[..., 0] += 0.5  # the sink
    sites = [SiteInfo("encoder", "self", 0, 1, "softmax_0", "softmax")]
    return AttentionResult([DenseMap(m.astype(np.float32))], sites, tokens=TokenAxis([f"t{i}" for i in range(t)]))


def _named_key(text: str) -> int:
    return int(re.search(r"→ key “t\d+” \((\d+)\)", text).group(1))


def test_a_found_row_is_read_out_with_its_strongest_key_in_view(qtbot, window):
    w = window
    result = _sink_result()
    w._show_result(result)
    w.session.select(mode="head", layer=0, head=0)
    w.select_view("heatmap")
    view, hm = w.head_map, w.head_map.heatmap
    found = view.go_to_token("#300")
    assert found is not None and found.row == 300
    (r0, r1), (k0, k1) = hm.visible_span()
    assert r0 <= 300 <= r1 and r1 - r0 + 1 == FIND_SPAN and (k0, k1) == (r0, r1)  # self-attention: keys alike
    row = result.maps[0].array()[0, 0, 300].astype(np.float64)
    assert int(np.argmax(row)) == 0 < k0  # the sink: the row's strongest of all keys lies outside the view
    want = k0 + int(np.argmax(row[k0 : k1 + 1]))  # by hand: the strongest of the keys in view
    assert hm.hover == (300, want)
    text = hm.hover_label.text()
    assert _named_key(text) == want and text.endswith(f"{row[want]:.4f}")
    # a hover over any cell in view names that cell: its row and key, the span's own indices
    for r, c in ((r0, k0), (r1, k1), (300, (k0 + k1) // 2)):
        assert hm.cell_at_scene(hm.scene_pos_of(r, c)) == (r, c)
        hm.set_hover(r, c)
        assert _named_key(hm.hover_label.text()) == c and f"({r})" in hm.hover_label.text()


def test_a_short_map_reads_out_the_strongest_of_every_key(qtbot, window):
    w = window
    w._show_result(_sink_result(FIND_SPAN))
    w.select_view("heatmap")
    hm = w.head_map.heatmap
    hm.go_to(10)  # no zoom: every key in view, so the sink
    assert hm.visible_span() is None and hm.hover == (10, 0)
