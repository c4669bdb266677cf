"""The one max-pool (core.view.pooling) the Head map, the overview's thumbnails and the figure share: pooled band by
band of rows, it is the map padded with zeros to whole runs and reduced by numpy's max over each block (a signed
map: the value of largest magnitude), on random maps whose sides are no multiple of the runs; and what it holds
beside the cells is one band's worth, not the rows' maxima of the whole map (or a signed map's negated copy)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from attnviz.core import view as vm
from attnviz.core.view import pooling


def _blocks(m: np.ndarray, fq: int, fk: int) -> np.ndarray:
    """``[..., Tq, Tk]`` padded with zeros to whole runs, as ``[..., cells_q, fq, cells_k, fk]``."""
    *lead, tq, tk = m.shape
    pq, pk = -(-tq // fq) * fq, -(-tk // fk) * fk
    padded = np.zeros((*lead, pq, pk), m.dtype)
    padded[..., :tq, :tk] = m
    return padded.reshape(*lead, pq // fq, fq, pk // fk, fk)


def _max_by_hand(m: np.ndarray, fq: int, fk: int) -> np.ndarray:
    return _blocks(m, fq, fk).max(axis=(-3, -1))


def _signed_by_hand(m: np.ndarray, fq: int, fk: int) -> np.ndarray:
    """Each block's value of largest magnitude, with its sign (a tie between +x and -x keeps +x)."""
    b = _blocks(m, fq, fk)
    top, bottom = b.max(axis=(-3, -1)), b.min(axis=(-3, -1))
    return np.where(top >= -bottom, top, bottom)


# shapes with ragged edges (no side a multiple of its run), a run longer than a side, heads ahead of the rows
CASES = [
    ((37, 53), 4, 5),
    ((101, 99), 7, 3),
    ((64, 200), 64, 1),  # one run of rows: every row in one cell row
    ((50, 30), 64, 64),  # runs longer than the map: one cell, the zero padding counted
    ((3, 45, 61), 2, 6),
    ((2, 2, 33, 17), 5, 1),
    ((9, 400), 1, 7),  # keys pooled only
]


@pytest.mark.parametrize("band_bytes", [1, 700, 5_000, 1 << 30])  # a run a band, a few, many, the map whole
@pytest.mark.parametrize(("shape", "fq", "fk"), CASES)
def test_pooled_in_bands_it_is_the_max_over_each_zero_padded_block(monkeypatch, band_bytes, shape, fq, fk):
    monkeypatch.setattr(pooling, "BAND_BYTES", band_bytes)
    rng = np.random.default_rng(sum(shape) * 31 + fq * 7 + fk)
    m = rng.random(shape, dtype=np.float32)
    np.testing.assert_array_equal(vm.pool_by(m, fq, fk), _max_by_hand(m, fq, fk))
    signed = (m - 0.5).astype(np.float32)
    np.testing.assert_array_equal(vm.pool_by(signed, fq, fk, signed=True), _signed_by_hand(signed, fq, fk))
    # a negative map: the short last run's zero padding is its max (as the whole map's pooling draws it)
    np.testing.assert_array_equal(vm.pool_by(-m, fq, fk), _max_by_hand(-m, fq, fk))


def test_bands_are_whole_runs_whose_row_maxima_take_half_the_band_bytes(monkeypatch):
    monkeypatch.setattr(pooling, "BAND_BYTES", 10_000)
    m = np.zeros((2, 1000, 250), np.float32)  # a row of both heads: 2,000 bytes; its maxima, half the 10,000
    assert [pooling.band_rows(m, f) for f in (1, 3, 7)] == [2, 6, 14]  # two runs a band
    assert [pooling.band_rows(m, f, signed=True) for f in (1, 3)] == [1, 3]  # maxima and minima: one
    m = np.zeros((1000, 5000), np.float32)  # a row of 20,000 bytes: one run a band
    assert [pooling.band_rows(m, f) for f in (1, 4)] == [1, 4]


def test_pool_to_and_downsample_are_the_banded_pool_at_their_runs(monkeypatch):
    monkeypatch.setattr(pooling, "BAND_BYTES", 4_000)
    m = np.random.default_rng(3).random((333, 517), dtype=np.float32)
    cells, fq, fk = vm.pool_to(m, 40, 50)
    assert (fq, fk) == (9, 11) and cells.shape == (37, 47)
    np.testing.assert_array_equal(cells, _max_by_hand(m, 9, 11))
    np.testing.assert_array_equal(vm.downsample(m, 64), _max_by_hand(m, 6, 9))


def _peak(fn) -> tuple[np.ndarray, int]:
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_long_map_is_pooled_holding_its_cells_and_one_band():
    m = np.random.default_rng(4).random((3000, 3000), dtype=np.float32)  # 36 MB
    # the figure's pooling: 2 x 2 runs.  Pooled whole, the rows' maxima alone were 18 MB (and a signed map's
    # negated copy 36 MB); the cells are 9 MB
    cells, peak = _peak(lambda: vm.pool_to(m, 1500, 1500)[0])
    assert peak <= cells.nbytes + pooling.BAND_BYTES
    np.testing.assert_array_equal(cells, _max_by_hand(m, 2, 2))
    signed = m - np.float32(0.5)
    cells, peak = _peak(lambda: vm.pool_to(signed, 1500, 1500, signed=True)[0])
    assert peak <= cells.nbytes + 2 * pooling.BAND_BYTES  # a band, its negation, their row maxima
    np.testing.assert_array_equal(cells, _signed_by_hand(signed, 2, 2))
    # the overview's thumbnail: 47 x 47 runs, 64 x 64 cells (16 KB)
    thumb, peak = _peak(lambda: vm.downsample(m))
    assert thumb.shape == (64, 64) and peak <= thumb.nbytes + pooling.BAND_BYTES
