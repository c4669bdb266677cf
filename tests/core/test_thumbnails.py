"""The overview's pooled maps, kept with the result per filter setting (core/view/overview.py), against cell-by-cell maxima."""

from __future__ import annotations

import numpy as np

from attnviz.core import reduce
from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
from attnviz.core.view import overview as vm_overview

T = 203  # 4 positions per cell and a short last cell of 3: the zero padding is exercised


def _result(t: int = T, layers: int = 2, heads: int = 3, seed: int = 0) -> AttentionResult:
    rng = np.random.default_rng(seed)
    maps, sites = [], []
    for i in range(layers):
        x = rng.random((1, heads, t, t)).astype(np.float32) ** 8  # peaked rows: hiding changes the numbers
        maps.append(DenseMap(x / x.sum(-1, keepdims=True)))
        sites.append(SiteInfo("encoder", "self", i, heads, f"s{i}", "softmax"))
    special = [True] + [False] * (t - 2) + [True]
    return AttentionResult(maps, sites, tokens=TokenAxis([f"t{i}" for i in range(t)], special))


def _cell_max(m: np.ndarray, side: int = vm.THUMB) -> np.ndarray:
    """Each cell's largest weight, one cell at a time; a cell cut short by the map's edge also holds a 0."""
    f_q, f_k = -(-m.shape[0] // side), -(-m.shape[1] // side)
    out = np.zeros((-(-m.shape[0] // f_q), -(-m.shape[1] // f_k)), np.float32)
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            cell = m[i * f_q : (i + 1) * f_q, j * f_k : (j + 1) * f_k]
            short = cell.shape != (f_q, f_k)
            out[i, j] = max(float(cell.max()), 0.0) if short else cell.max()
    return out


def test_the_kept_reduction_is_the_cell_maxima_of_every_map_exactly():
    r = _result()
    assert not vm.thumbnails_kept(r, vm.Selection())
    thumbs = vm.thumbnails(r, vm.Selection())
    assert vm.thumbnails_kept(r, vm.Selection())
    assert len(thumbs) == 6
    for (_, layer, head), small in thumbs.items():
        assert small.shape == (51, 51)
        np.testing.assert_array_equal(small, _cell_max(r.maps[layer].head(0, head)))
    again = vm.thumbnails(r, vm.Selection())
    assert all(np.shares_memory(again[k], thumbs[k]) for k in thumbs)  # served from what was kept


def test_colour_scale_log_and_focus_reuse_it_but_filters_pool_again():
    r = _result()
    vm.thumbnails(r, vm.Selection())
    for drawn_only in ({"log": True}, {"scale": "shared"}, {"scale": "map"}, {"layer": 1, "head": 2, "mode": "head"}):
        assert vm.thumbnails_kept(r, vm.Selection(**drawn_only))
    hidden = vm.Selection(hide_special=True)
    assert not vm.thumbnails_kept(r, hidden)  # renormalised rows: not derivable from the pooled cells
    assert not vm.thumbnails_kept(r, vm.Selection(keep=0.5))


def test_hidden_special_tokens_pool_the_head_map_that_is_drawn():
    r = _result()
    plain = vm.thumbnails(r, vm.Selection())
    sel = vm.Selection(hide_special=True)
    thumbs = vm.thumbnails(r, sel)
    for (_, layer, head), small in thumbs.items():
        drawn = vm.compute_map(r, sel.with_(mode="head", layer=layer, head=head)).matrix  # 201 x 201, rows renormalised
        np.testing.assert_array_equal(small, _cell_max(drawn))
        assert small.shape == (51, 51) and not np.array_equal(small, plain[(0, layer, head)])
    assert vm.thumbnails_kept(r, sel) and vm.thumbnails_kept(r, vm.Selection())  # both settings kept


def test_a_setting_that_changes_nothing_shares_the_entry():
    r = _result()
    none_special = AttentionResult(r.maps, r.sites, tokens=TokenAxis([f"t{i}" for i in range(T)]))
    vm.thumbnails(none_special, vm.Selection())
    assert vm.thumbnails_kept(none_special, vm.Selection(hide_special=True))  # nothing to hide
    assert vm.thumbnails_kept(none_special, vm.Selection(step=0))  # no generation: every step is the whole map


def test_kept_mass_pools_the_thresholded_head_map():
    r = _result(t=90, layers=1, heads=2)
    sel = vm.Selection(keep=0.5, hide_special=True)
    for (_, layer, head), small in vm.thumbnails(r, sel).items():
        drawn = vm.compute_map(r, sel.with_(mode="head", layer=layer, head=head)).matrix
        np.testing.assert_array_equal(small, _cell_max(drawn))


def test_recomputing_replaces_what_was_kept_with_the_same_numbers():
    r = _result()
    kept = vm.thumbnails(r, vm.Selection())
    fresh = vm.thumbnails(r, vm.Selection(), use_cache=False)
    assert all(not np.shares_memory(fresh[k], kept[k]) and np.array_equal(fresh[k], kept[k]) for k in kept)
    assert all(np.shares_memory(vm.thumbnails(r, vm.Selection())[k], fresh[k]) for k in kept)


def test_the_kept_arrays_cannot_be_changed_in_place():
    small = vm.thumbnails(_result(t=70, layers=1, heads=1), vm.Selection())[(0, 0, 0)]
    assert not small.flags.writeable


def test_dropping_positions_anywhere_renormalises_each_remaining_row():
    rng = np.random.default_rng(1)
    m = rng.random((2, 7, 6)).astype(np.float32)
    for dq, dk in (([0, 6], [0, 5]), ([3], [2, 4]), ([], [1])):  # at the ends (sliced) and inside (taken)
        want = np.delete(np.delete(m, dq, axis=1), dk, axis=2)
        want = want / want.sum(-1, keepdims=True)
        got = reduce.drop_positions(m, np.isin(np.arange(7), dq), np.isin(np.arange(6), dk))
        np.testing.assert_allclose(got, want, rtol=1e-6)
        got[...] = 0  # a new array: the maps it came from are untouched
        assert m.min() > 0


def test_a_head_switch_under_an_aggregate_changes_no_map_input():
    r = _result(t=30)
    mean = vm.Selection(mode="mean", layer=1, head=0)
    assert vm.map_inputs(mean) == vm.map_inputs(mean.with_(head=2, query=4))
    a, b = vm.compute_map(r, mean), vm.compute_map(r, mean.with_(head=2, query=4))
    np.testing.assert_array_equal(a.matrix, b.matrix)
    assert a.title == b.title
    head = mean.with_(mode="head")
    assert vm.map_inputs(head) != vm.map_inputs(head.with_(head=2))
    assert not np.array_equal(vm.compute_map(r, head).matrix, vm.compute_map(r, head.with_(head=2)).matrix)


def test_heads_pooled_on_threads_are_the_same_cell_maxima(monkeypatch):
    """Large layers pool their heads on threads: the same numbers, in head order, with and without filters."""
    monkeypatch.setattr(vm_overview, "POOL_THREADS_FROM", 0)  # every layer through the thread pool (read there)
    r = _result(layers=2, heads=5, seed=3)
    for sel in (vm.Selection(), vm.Selection(hide_special=True, keep=0.7)):
        thumbs = vm.thumbnails(r, sel, use_cache=False)
        for (_, layer, head), small in thumbs.items():
            drawn = vm.compute_map(r, sel.with_(mode="head", layer=layer, head=head)).matrix
            np.testing.assert_array_equal(small, _cell_max(drawn))


def test_pooling_a_map_with_hidden_positions_equals_pooling_the_renormalised_map_bit_for_bit():
    """The overview pools hidden-token maps without making them: the same bits as drop_positions + downsample."""
    rng = np.random.default_rng(7)
    for t_q, t_k, side in ((203, 203, 64), (130, 70, 64), (40, 300, 16), (9, 9, 64)):
        m = rng.random((t_q, t_k)).astype(np.float32) ** 6
        m[5] = 0  # a row with no mass: zeros after renormalising
        m[7, :] = m[7, :] * 1e-30  # a row of tiny weights: their sum is still > 0
        m[2, 3] = np.nan  # a NaN weight: its row's cells stay NaN
        for dq, dk in (
            ([0, t_q - 1], [0, t_k - 1]),  # special tokens at both ends (views)
            ([3, 4, 8], [1, t_k // 2]),  # inside (taken)
            ([], [t_k - 1]),
            ([1], []),
            (list(range(t_q)), [0]),  # every row hidden
        ):
            drop_q, drop_k = np.isin(np.arange(t_q), dq), np.isin(np.arange(t_k), dk)
            want = vm.downsample(reduce.drop_positions(m, drop_q, drop_k), side)
            got = vm_overview.pool_dropped(m, drop_q, drop_k, side)
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
            if want.size:  # and cell by cell, independently of downsample
                np.testing.assert_array_equal(got, _cell_max(reduce.drop_positions(m, drop_q, drop_k), side))
