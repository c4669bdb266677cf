"""A crafted 30,000-token map (3.6 GB) drawn by ``attnviz figure --maps`` peaked at 7.4 GB: a second full-size copy
(the mean over the file's one head) and a full-size NaN/Inf mask (a byte a value).  Measured here on a small map
with tracemalloc, which counts numpy's allocations: each step's peak beside the map's own bytes."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from attnviz import AttnvizError
from attnviz.core import io, reduce
from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
from attnviz.core.io import load_npz, save_npz

N = 1024  # 4 MB of float32: a NaN/Inf mask of the whole map would be 1 MB, a copy 4 MB


def _one_head(n: int) -> AttentionResult:
    m = np.full((1, 1, n, n), 1.0 / n, np.float32)
    m[0, 0, np.arange(n), np.arange(n)] += 0.5
    site = SiteInfo("encoder", "self", 0, 1, "softmax_0", "softmax")
    return AttentionResult([DenseMap(m)], [site], tokens=TokenAxis([f"t{i}" for i in range(n)]))


def _peak_beyond(fn) -> tuple[object, int]:
    """``fn()`` and the most bytes it held at once beyond what it returns (the returned map counted out)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        out = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return out, peak


@pytest.mark.parametrize("how", ["mean", "max", "min"])
def test_one_heads_aggregate_is_that_head_itself_not_a_copy(how):
    rng = np.random.default_rng(0)
    heads = rng.random((1, 5, 7), dtype=np.float32)
    heads[0, 2, 3] = np.nan  # kept where it is, as numpy's reduction keeps it
    got = reduce.aggregate_heads(heads, how)
    want = {"mean": np.mean, "max": np.max, "min": np.min}[how](heads, axis=0)
    np.testing.assert_array_equal(got, want)  # bit for bit (NaN where NaN)
    assert got.dtype == np.float32 and np.shares_memory(got, heads)


def test_the_head_map_of_a_one_head_file_holds_no_second_copy_of_it():
    result = _one_head(N)
    nbytes = result.maps[0].array().nbytes
    mv, peak = _peak_beyond(lambda: vm.head_map(result, vm.Selection(mode="mean")))
    assert mv.matrix.shape == (N, N) and float(mv.matrix[5, 5]) == pytest.approx(0.5 + 1.0 / N)
    assert peak < nbytes / 8, f"{peak:,} bytes held drawing a {nbytes:,}-byte map"


def test_loading_checks_nan_and_inf_band_by_band_without_a_mask_of_the_whole_map(tmp_path, monkeypatch):
    n = 2 * N  # 16 MB: numpy's own read buffers (~0.7 MB) well under the 4 MB a whole-map mask takes
    path = save_npz(_one_head(n), tmp_path / "m.npz")
    nbytes = n * n * 4
    monkeypatch.setattr(io, "FINITE_BAND", 4096, raising=False)
    result, peak = _peak_beyond(lambda: load_npz(path))
    assert result.maps[0].shape == (1, 1, n, n)
    # the map itself and the reader's buffers: a whole-map mask would add nbytes / 4
    assert peak - nbytes < nbytes / 8, f"{peak - nbytes:,} bytes held beyond the map's {nbytes:,}"


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("order", ["C", "F"])
def test_a_non_finite_value_in_the_last_band_is_still_refused(tmp_path, monkeypatch, bad, order):
    result = _one_head(64)
    a = np.asarray(result.maps[0].array(), order=order)
    a[0, 0, 63, 62] = bad  # the last value in either order's walk but one
    result.maps[0] = DenseMap(a)
    path = save_npz(result, tmp_path / "m.npz")
    monkeypatch.setattr(io, "FINITE_BAND", 100, raising=False)  # 41 bands of 64 x 64 values
    with pytest.raises(AttnvizError, match="attn_000 contains NaN or Inf values"):
        load_npz(path)
