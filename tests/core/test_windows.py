"""Swin windows on the patch grid (attnviz.core.windows), on cases small enough to write out by hand.  The
comparison with transformers' own windows is tests/runtime/test_optimum_zoo.py."""

import numpy as np

from attnviz.core import AttentionResult, SiteInfo
from attnviz.core.attention import PatchGrid
from attnviz.core.io import load_npz, save_npz
from attnviz.core.windows import SiteWindows, WindowedMap, WindowLayout, layout_problem, stage_grid


def test_shifted_windows_hold_the_patches_the_roll_brought_there():
    """4x4 grid, 2x2 windows, shift 1: rolled cell (y, x) holds image patch ((y+1) % 4, (x+1) % 4), so window 0
    holds image patches (1,1) (1,2) (2,1) (2,2) and window 3 wraps around to (3,3) (3,0) (0,3) (0,0)."""
    pos = SiteWindows(1, 4, 4, 2, 1).positions()
    assert pos[0].tolist() == [5, 6, 9, 10]
    assert pos[3].tolist() == [15, 12, 3, 0]
    assert SiteWindows(1, 4, 4, 2, 0).positions()[1].tolist() == [2, 3, 6, 7]  # unshifted: plain blocks
    assert sorted(pos.ravel().tolist()) == list(range(16))  # every patch in exactly one window


def test_windowed_map_puts_each_window_at_its_patches_and_zero_elsewhere():
    """Batch 2, 4 windows each, 2 heads: every value lands at (its query's patch, its key's patch) of its own image."""
    sw = SiteWindows(1, 4, 4, 2, 1)
    rng = np.random.default_rng(0)
    w = rng.random((2 * 4, 2, 4, 4)).astype(np.float32)
    w /= w.sum(-1, keepdims=True)
    m = WindowedMap(w, 2, sw)
    a = m.array()
    assert m.shape == a.shape == (2, 2, 16, 16)
    assert a[1, 1, 15, 0] == w[4 + 3, 1, 0, 3]  # image 1, window 3: query (3,3) -> key (0,0)
    assert a[0, 0, 5, 10] == w[0, 0, 0, 3]
    assert a[0, 0, 5, 15] == 0.0  # (1,1) and (3,3) share no window
    np.testing.assert_allclose(a.sum(-1), 1.0, atol=1e-6)
    assert np.count_nonzero(a) == w.size
    np.testing.assert_array_equal(m.head(1, 0), a[1, 0])


def test_layout_follows_transformers_rules_per_stage():
    """Odd blocks shift by window // 2; a stage whose grid is no larger than the window is one unshifted window;
    patch merging halves the grid rounding up."""
    lay = WindowLayout.from_meta({"patch_size": 4, "window_size": 4, "depths": [2, 2, 1]})
    got = [(s.stage, s.rows, s.cols, s.window, s.shift) for s in lay.sites((64, 32))]
    assert got == [(1, 16, 8, 4, 0), (1, 16, 8, 4, 2), (2, 8, 4, 4, 0), (2, 8, 4, 4, 0), (3, 4, 2, 2, 0)]
    assert (stage_grid(PatchGrid(7, 5), 3).rows, stage_grid(PatchGrid(7, 5), 3).cols) == (2, 2)
    for bad in (
        {},
        {"patch_size": 4, "window_size": 0, "depths": [2]},
        {"patch_size": 4, "window_size": 4, "depths": []},
        {"patch_size": True, "window_size": 4, "depths": [2]},
        {"patch_size": 4, "window_size": 4, "depths": ["2"]},
    ):
        assert WindowLayout.from_meta(bad) is None


def test_layout_problems_name_what_was_expected():
    sw = SiteWindows(2, 8, 8, 4, 2)
    assert layout_problem(sw, (8, 3, 16, 16), 2) is None
    assert "predicts [8, heads, 16, 16]" in layout_problem(sw, (4, 3, 16, 16), 2)
    assert "not a whole number of 3x3 windows" in layout_problem(SiteWindows(1, 8, 8, 3, 0), (4, 3, 9, 9), 1)


def test_stages_survive_an_npz_round_trip(tmp_path):
    """extract's file keeps each site's stage (and files of other models keep their six keys)."""
    sw = SiteWindows(1, 4, 4, 2, 0)
    maps = [WindowedMap(np.full((4, 1, 4, 4), 0.25, np.float32), 1, sw)]
    site = SiteInfo("encoder", "self", 0, 1, "n", "softmax", stage=1)
    r = AttentionResult(maps=maps, sites=[site], patch_grid=PatchGrid(4, 4))
    back = load_npz(save_npz(r, tmp_path / "m.npz"))
    assert back.sites == [site] and [b.name for b in back.blocks()] == ["encoder self-attention stage 1"]
    assert "stage" not in SiteInfo("encoder", "self", 0, 1, "n", "softmax").to_dict()
