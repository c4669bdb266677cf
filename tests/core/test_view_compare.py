"""The view model of two models compared: B's map of A's selection and A − B (attnviz.core.view), checked against
the maps themselves."""

import numpy as np
import pytest

from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
from attnviz.core.view import Selection, ViewError, compute_diff_map, compute_other_map, matching_selection


def result(layers, seed, heads=2, t=4):
    rng = np.random.default_rng(seed)
    maps, sites = [], []
    for layer in layers:
        x = rng.random((1, heads, t, t)).astype(np.float32)
        maps.append(DenseMap(x / x.sum(-1, keepdims=True)))
        sites.append(SiteInfo("encoder", "self", layer, heads, f"/l{layer}/Softmax", "softmax"))
    axis = TokenAxis(["[CLS]", "a", "b", "[SEP]"], [True, False, False, True])
    return AttentionResult(maps, sites, tokens=axis)


def test_b_is_matched_by_layer_number_and_a_minus_b_is_the_difference_on_a_symmetric_scale():
    a, b = result([0, 1], 1), result([1], 2)  # B has only layer 1 (A's second layer)
    sel = Selection(layer=1, head=1)
    assert matching_selection(a, b, sel) == sel.with_(layer=0)
    np.testing.assert_array_equal(compute_other_map(a, b, sel).matrix, b.maps[0].array()[0, 1])
    d = compute_diff_map(a, b, sel.with_(log=True))
    want = a.maps[1].array()[0, 1] - b.maps[0].array()[0, 1]
    np.testing.assert_array_equal(d.matrix, want)
    top = float(np.abs(want).max())
    assert d.diverging and (d.vmin, d.vmax) == (-top, top) and d.title.endswith("A − B")
    with pytest.raises(ViewError, match="model B's encoder self-attention has no layer 0"):
        matching_selection(a, b, sel.with_(layer=0))
    with pytest.raises(ViewError, match="other layers than A's"):
        compute_diff_map(a, b, sel.with_(mode="mean"))


def test_hidden_special_tokens_are_hidden_in_both_before_the_difference():
    a, b = result([0], 3), result([0], 4)
    d = compute_diff_map(a, b, Selection(hide_special=True))
    assert d.q_labels == ["a", "b"] and d.matrix.shape == (2, 2)
    ra = a.maps[0].array()[0, 0][1:3, 1:3]
    rb = b.maps[0].array()[0, 0][1:3, 1:3]
    np.testing.assert_allclose(d.matrix, ra / ra.sum(-1, keepdims=True) - rb / rb.sum(-1, keepdims=True), atol=1e-6)


def test_a_map_against_itself_is_zero_on_the_smallest_symmetric_scale():
    a = result([0, 1], 5)
    d = compute_diff_map(a, a, Selection(layer=1))
    assert not d.matrix.any() and d.vmin == -d.vmax > -1e-5
