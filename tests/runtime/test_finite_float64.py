"""A double-precision model's maps at run time: the NaN/Inf check (runtime/finite.py) and the float32 conversion
(runtime/sitemaps.py ``to_bhqk``) hold nothing of the map's size beside it (tracemalloc: an allocation count, not a
timing)."""

import tracemalloc

import numpy as np
import pytest


def test_a_float64_maps_finiteness_check_makes_no_mask_of_its_size():
    """The isolation child checks a double-precision model's maps for NaN/Inf after the run (runtime/finite.py):
    through their sum of squares, as float32 maps, not ``np.isfinite``'s bool mask (an eighth of the map) beside
    them; the verdicts are numpy's (tests/runtime/test_vlm_chain.py)."""
    from attnviz.runtime.finite import all_finite

    a = np.random.default_rng(0).random((1, 4, 512, 512))  # 8 MiB
    tracemalloc.start()
    try:
        ok = all_finite(a)
        allocated = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert ok and allocated < 0.01 * a.nbytes, allocated
    a[0, 1, 2, 3] = np.nan
    assert not all_finite(a)


@pytest.mark.parametrize("layout", ["4d", "3d", "5d", "transposed"])
def test_a_float64_map_converts_to_float32_without_a_temporary(layout):
    """``to_bhqk`` of a float64 map: numpy's float32 values bit for bit, and nothing allocated besides the float32
    map itself (numpy's cast converts a buffer at a time: the float64 output and the float32 map are all there is,
    which a conversion in bands could not lower)."""
    from attnviz.runtime.sitemaps import to_bhqk

    a = np.random.default_rng(1).standard_normal((1, 8, 256, 256)) * 1e-3
    a[0, 0, 0, :4] = [np.nan, np.inf, 1e300, 1e-320]  # NaN, Inf, past float32's range, a float64 denormal
    x = {
        "4d": a,
        "3d": a.reshape(8, 256, 256),
        "5d": a.reshape(1, 2, 4, 256, 256),
        "transposed": np.ascontiguousarray(a.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2),
    }[layout]
    tracemalloc.start()
    try:
        with np.errstate(over="ignore"):  # 1e300 becomes inf (refused later as "contains NaN or Inf")
            got = to_bhqk(x, 1)
        allocated = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    with np.errstate(over="ignore"):
        want = np.asarray(a, np.float32)
    assert got.dtype == np.float32 and got.flags.c_contiguous and got.shape == a.shape
    assert got.tobytes() == want.tobytes()
    assert allocated < 1.01 * want.nbytes, allocated / want.nbytes
