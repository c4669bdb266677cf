"""A long map's Head map, zoomed: the region of positions drawn for a view's range and pixels, its runs, and its
cells -- against hand computations and numpy's max over blocks of the region."""

from __future__ import annotations

import tracemalloc

import numpy as np

from attnviz.core import view as vm
from attnviz.core.view import pooling
from attnviz.core.view.zoom import run_length


def _by_hand(m: np.ndarray, fq: int, fk: int) -> np.ndarray:
    """Max over blocks of fq x fk positions, a short last block padded with zeros."""
    pq, pk = -(-m.shape[0] // fq) * fq, -(-m.shape[1] // fk) * fk
    padded = np.zeros((pq, pk), m.dtype)
    padded[: m.shape[0], : m.shape[1]] = m
    return padded.reshape(pq // fq, fq, pk // fk, fk).max(axis=(1, 3))


def _map(tq: int, tk: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((tq, tk), dtype=np.float32)


def test_runs_are_the_positions_a_pixel_rounded_up_and_one_when_each_position_has_a_pixel():
    assert run_length(2048.0, 1024) == 2
    assert run_length(2048.0000001, 1024) == 2  # range arithmetic's last digits do not make a 3
    assert run_length(2049.0, 1024) == 3
    assert run_length(100.0, 800) == 1
    assert run_length(100.0, 0) == 1


def test_the_region_is_the_visible_positions_and_a_margin_each_side_on_the_runs_grid():
    # keys 1000..1400 over 100 px: 4 a cell, 100 more each side; rows 200..250 over 100 px: one each, 12.5 each side
    r = vm.plan_region((1000, 3000), (1000.0, 1400.0), (200.0, 250.0), (100, 100), margin=0.25)
    assert r == vm.MapRegion(q0=187, q1=263, k0=900, k1=1500, fq=1, fk=4)
    assert r.cells == (76, 150) and r.rect == (900, 187, 600, 76) and r.note == " (max of 1 × 4 positions a cell)"
    # off the grid: 901.3 starts at 900 (a multiple of 4), 1501.3 ends at 1504
    r = vm.plan_region((1000, 3000), (1001.3, 1401.3), (200.0, 250.0), (100, 100), margin=0.25)
    assert (r.k0, r.k1, r.fk) == (900, 1504, 4)


def test_the_region_stops_at_the_maps_ends_and_its_last_run_may_be_short():
    # keys 600..1003 over 100 px: 5 a cell; 100.75 each side: 499.25 -> 495 (grid), 1103.75 -> the end, 1003
    r = vm.plan_region((1000, 1003), (600.0, 1003.0), (-50.0, 350.0), (100, 100), margin=0.25)
    assert r == vm.MapRegion(q0=0, q1=452, k0=495, k1=1003, fq=4, fk=5)
    assert r.cells == (113, 102) and r.rect == (495, 0, 510, 452)  # 508 keys: 101 runs of 5 and one of 3


def test_a_view_beside_the_map_has_no_region():
    assert vm.plan_region((100, 100), (300.0, 400.0), (0.0, 100.0), (100, 100), margin=0.25) is None
    assert vm.plan_region((100, 100), (0.0, 100.0), (-90.0, -40.0), (100, 100), margin=0.25) is None


def test_a_region_is_pooled_as_numpys_max_over_its_blocks_and_as_the_whole_maps_pooling_at_its_runs():
    m = _map(1000, 1003)
    r = vm.plan_region(m.shape, (600.0, 1003.0), (130.0, 530.0), (100, 100), margin=0.25)
    assert (r.fq, r.fk) == (4, 5)
    cells = vm.pool_region(m, r)
    np.testing.assert_array_equal(cells, _by_hand(m[r.q0 : r.q1, r.k0 : r.k1], r.fq, r.fk))
    # the region's borders on the runs' grid: its cells are the whole map's cells at those runs
    whole = _by_hand(m, r.fq, r.fk)
    np.testing.assert_array_equal(cells, whole[r.q0 // r.fq : -(-r.q1 // r.fq), r.k0 // r.fk :])
    # leading axes (heads) pooled alike
    stacked = vm.pool_region(np.stack([m, -m]), r)
    np.testing.assert_array_equal(stacked[0], cells)


def test_at_one_position_a_pixel_the_region_is_the_map_itself_unpooled():
    m = _map(3000, 3000)
    r = vm.plan_region(m.shape, (1200.0, 1300.0), (100.0, 180.0), (400, 400), margin=0.25)
    assert (r.fq, r.fk, r.q0, r.q1, r.k0, r.k1) == (1, 1, 80, 200, 1175, 1325)
    cells = vm.pool_region(m, r)
    np.testing.assert_array_equal(cells, m[80:200, 1175:1325])
    assert np.shares_memory(cells, m)  # a view: nothing copied
    assert r.note == ""


def test_a_signed_map_keeps_each_cells_value_of_largest_magnitude_with_its_sign():
    m = _map(400, 400) - 0.5
    r = vm.plan_region(m.shape, (100.0, 300.0), (0.0, 200.0), (50, 50), margin=0.25)
    assert (r.fq, r.fk) == (4, 4)
    cells = vm.pool_region(m, r, signed=True)
    part = m[r.q0 : r.q1, r.k0 : r.k1]
    blocks = part.reshape(part.shape[0] // 4, 4, part.shape[1] // 4, 4).transpose(0, 2, 1, 3).reshape(*cells.shape, 16)
    want = np.take_along_axis(blocks, np.abs(blocks).argmax(-1)[..., None], -1)[..., 0]
    np.testing.assert_array_equal(cells, want)


def test_a_drawn_region_holds_a_view_inside_its_margin_at_its_runs_only():
    shape, px = (8000, 8000), (500, 500)
    drawn = vm.plan_region(shape, (2000.0, 3000.0), (2000.0, 3000.0), px, margin=0.25)
    assert (drawn.fq, drawn.fk) == (2, 2)
    inside = vm.plan_region(shape, (2200.0, 3200.0), (1800.0, 2800.0), px, margin=0.0)  # panned 200 positions
    beyond = vm.plan_region(shape, (2400.0, 3400.0), (2000.0, 3000.0), px, margin=0.0)  # past the 250 drawn
    finer = vm.plan_region(shape, (2200.0, 2600.0), (2200.0, 2600.0), px, margin=0.0)  # zoomed in: 1 a cell
    assert drawn.holds(inside) and not drawn.holds(beyond) and not drawn.holds(finer)


def test_pooling_a_region_copies_none_of_the_map():
    m = _map(3000, 3000)  # 36 MB
    r = vm.plan_region(m.shape, (1000.0, 2000.0), (1000.0, 2000.0), (500, 500), margin=0.25)
    tracemalloc.start()
    try:
        cells = vm.pool_region(m, r)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    part = m[r.q0 : r.q1, r.k0 : r.k1]
    # what is held: the cells and one band's row maxima; a copy of the region alone would be 9 MB, of the map 36 MB
    assert part.nbytes == 9_000_000 and peak <= cells.nbytes + pooling.BAND_BYTES
    np.testing.assert_array_equal(cells, _by_hand(part, 2, 2))


def test_a_region_pooled_in_many_bands_of_rows_is_the_region_pooled_whole(monkeypatch):
    monkeypatch.setattr(pooling, "BAND_BYTES", 10_000)  # a few runs of rows a band; the last band and last run short
    m = _map(1001, 700, seed=5) - 0.5
    r = vm.plan_region(m.shape, (100.0, 700.0), (300.0, 1001.0), (150, 150), margin=0.25)
    part = m[r.q0 : r.q1, r.k0 : r.k1]
    # 881 rows in runs of 5 (the last of 1, at the map's end), each run of 700 keys more than a band: 177 bands
    assert (r.fq, r.fk, r.q1, part.shape) == (5, 4, 1001, (881, 700)) and 5 * 700 * 4 > pooling.BAND_BYTES
    np.testing.assert_array_equal(vm.pool_region(m, r), _by_hand(part, r.fq, r.fk))
    np.testing.assert_array_equal(vm.pool_region(m, r, signed=True), vm.pool_by(part, r.fq, r.fk, signed=True))
    stacked = vm.pool_region(np.stack([m, m[::-1]]), r)  # heads ahead of the rows: a band holds every head's rows
    np.testing.assert_array_equal(stacked[1], _by_hand(m[::-1][r.q0 : r.q1, r.k0 : r.k1], r.fq, r.fk))
