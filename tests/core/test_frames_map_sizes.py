"""Frames of several sizes (one prompt's images, each resized to its own size: Qwen2-VL's separate tower runs) kept as
one :class:`attnviz.core.frames.FramesMap` (``sizes``: each frame's patches; a flat buffer, each frame a view of it):
every reader of a tower's frames gives what the dense block-diagonal map gives, that map laid out here by hand
(each frame at the keys after its row's earlier frames): heads and the array, thumbnails, every aggregate and
rollout, the heatmap after hiding and kept mass, Image regions' row sums, the stats table, the Head map's frame,
one row of a padded batch, the ``.npz`` round trip, and the finite check."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest
from frames_by_hand import block_diagonal_by_hand

from attnviz import AttnvizError
from attnviz.core import io
from attnviz.core import view as v
from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
from attnviz.core.frames import FramesMap
from attnviz.core.view.selection import frames_reduction

HEADS, LAYERS = 3, 2
SIZES = [5, 9, 4, 7]  # row 0: frames of 5, 9 and 4 patches (18 keys); row 1: one of 7 (and 11 keys of padding)
PER_ROW = [3, 1]
SIDE = 18


def frames_each(seed=0) -> list[list[np.ndarray]]:
    """Each layer's frames' maps, each ``[H, P_f, P_f]``, rows summing to 1 (softmax of random scores)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(LAYERS):
        layer = []
        for p in SIZES:
            s = rng.normal(size=(HEADS, p, p)) * 3
            e = np.exp(s - s.max(-1, keepdims=True))
            layer.append((e / e.sum(-1, keepdims=True)).astype(np.float32))
        out.append(layer)
    return out


def result(maps: list) -> AttentionResult:
    sites = [SiteInfo("encoder", "self", i, HEADS, f"n{i}", "softmax") for i in range(LAYERS)]
    special = [i == 0 for i in range(SIDE)]  # one special key, so "hide special tokens" changes the numbers
    labels = [f"img1({i // 5},{i % 5})" for i in range(5)] + [f"img2({i // 3},{i % 3})" for i in range(9)]
    labels += [f"img3({i // 2},{i % 2})" for i in range(4)]
    return AttentionResult(maps=maps, sites=sites, tokens=TokenAxis(labels, special))


@pytest.fixture(scope="module")
def pair() -> tuple[AttentionResult, AttentionResult]:
    each = frames_each()
    frames = [FramesMap.of(layer, PER_ROW) for layer in each]
    assert all(not m.uniform and m.sizes == SIZES and m.blocks.ndim == 1 for m in frames)
    return result(frames), result([DenseMap(block_diagonal_by_hand(layer, PER_ROW, SIDE)) for layer in each])


def test_heads_and_array_are_the_block_diagonal_map(pair):
    frames, dense = pair
    for f, d in zip(frames.maps, dense.maps, strict=True):
        assert f.shape == d.shape == (2, HEADS, SIDE, SIDE) and f.spans(0) == [(0, 5), (5, 9), (14, 4)]
        assert f.nbytes == HEADS * sum(p * p for p in SIZES) * 4 and io.written_bytes(f) == f.nbytes
        np.testing.assert_array_equal(f.array(), d.array())
        for b in range(2):
            for h in range(HEADS):
                np.testing.assert_array_equal(f.head(b, h), d.head(b, h))
    with pytest.raises(ValueError, match="no one P"):
        _ = frames.maps[0].keys


def test_frames_of_one_size_stay_one_array():
    same = FramesMap.of([np.ones((2, 4, 4), np.float32)] * 3, [3])
    assert same.uniform and same.blocks.shape == (3, 2, 4, 4) and same.keys == 4


@pytest.mark.parametrize("side", [3, 5, 18])
def test_pooled_thumbnails_are_the_dense_maps_pooled(pair, side):
    frames, dense = pair
    for f, d in zip(frames.maps, dense.maps, strict=True):
        for b in range(2):
            for n_q, n_k in ((18, 18), (12, 18), (18, 7), (4, 4)):
                np.testing.assert_array_equal(
                    f.pooled(b, n_q, n_k, side), v.downsample(d.array()[b, :, :n_q, :n_k], side)
                )


@pytest.mark.parametrize("mode", v.MODES)
@pytest.mark.parametrize("batch", [0, 1])
def test_every_aggregate_and_its_row_sums_are_the_dense_ones(pair, mode, batch):
    frames, dense = pair
    sel = v.Selection(mode=mode, layer=1, head=2, layer_lo=0, layer_hi=1, batch=batch)
    got, what = v.head_matrix(frames.blocks(batch)[0], sel)
    want, want_what = v.head_matrix(dense.blocks(batch)[0], sel)
    assert what == want_what
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 if mode == "rollout" else 0)
    fn, layers = frames_reduction(frames.blocks(batch)[0], sel)
    for lo, hi in ((0, 1), (6, 7), (3, 15), (0, SIDE), (14, 18), (4, 6), (-2, 3)):
        np.testing.assert_allclose(
            layers[0].row_sum(batch, lo, hi, fn, layers),
            want[max(lo, 0) : hi].sum(axis=0),
            rtol=0,
            atol=1e-6 if mode == "rollout" else 0,
        )


@pytest.mark.parametrize("hide,keep", [(False, 1.0), (True, 1.0), (True, 0.5)])
def test_thumbnails_and_the_token_map_are_the_dense_ones(pair, hide, keep):
    frames, dense = pair
    for batch in (0, 1):
        sel = v.Selection(mode="mean", hide_special=hide, keep=keep, batch=batch)
        got, want = v.thumbnails(frames, sel, use_cache=False), v.thumbnails(dense, sel, use_cache=False)
        assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in want)
        np.testing.assert_array_equal(v.compute_map(frames, sel).matrix, v.compute_map(dense, sel).matrix)


@pytest.mark.parametrize("mode", v.MODES)
def test_the_head_maps_frame_is_the_dense_maps_block(pair, mode, never_laid_out):
    frames, dense = pair
    assert v.tower_frames(frames, v.Selection()) == ["image 1", "image 2", "image 3"]
    assert v.tower_frames(dense, v.Selection()) is None  # a dense map: the whole map, as before
    for f, (o, p) in enumerate([(0, 5), (5, 9), (14, 4)]):
        sel = v.Selection(mode=mode, layer=1, head=1, layer_lo=0, layer_hi=1, frame=f)
        mv = v.head_map(frames, sel)
        want = v.compute_map(dense, sel.with_(keep=1.0))
        np.testing.assert_allclose(mv.matrix, want.matrix[o : o + p, o : o + p], rtol=0, atol=1e-6)
        assert mv.q_pos.tolist() == list(range(o, o + p)) and mv.k_labels == want.k_labels[o : o + p]
        assert f"image {f + 1}" in mv.title
    # hiding the special key 0 (image 1's first patch): image 1's map less its row and column, rows renormalised
    sel = v.Selection(mode="head", layer=0, head=2, hide_special=True)
    got, want = v.head_map(frames, sel), v.compute_map(dense, sel)
    np.testing.assert_allclose(got.matrix, want.matrix[:4, :4], rtol=1e-6)
    assert got.q_pos.tolist() == [1, 2, 3, 4]


def test_the_stats_frame_by_frame_are_the_laid_out_heads(pair):
    from frames_by_hand import per_frame_first_prev, per_frame_sink_share

    from attnviz.core.stats import block_head_stats, head_stats

    frames, dense = pair
    for batch in (0, 1):
        fb, db = frames.blocks(batch)[0], dense.blocks(batch)[0]
        special = np.asarray(db.key_axis.special, bool)
        for layer in range(LAYERS):
            for h in range(HEADS):
                got, want = block_head_stats(fb, layer, h), head_stats(db.head(layer, h), special)
                sizes = SIZES[: PER_ROW[0]] if batch == 0 else SIZES[PER_ROW[0] :]
                want["first"], want["prev"] = per_frame_first_prev(db.head(layer, h), sizes)  # each frame's
                want["sink_share"] = per_frame_sink_share(db.head(layer, h), sizes)
                for k in want:
                    assert got[k] == pytest.approx(want[k], rel=1e-12, abs=1e-15), k


def test_the_npz_keeps_the_frames_flat_and_reads_back_the_same_maps(pair, tmp_path):
    frames, dense = pair
    io.save_npz(frames, tmp_path / "f.npz")
    with np.load(tmp_path / "f.npz") as z:
        assert z["attn_000"].shape == (HEADS * sum(p * p for p in SIZES),) and z["attn_000_sizes"].tolist() == SIZES
        assert z["attn_000_frames"].tolist() == PER_ROW
    back = io.load_npz(tmp_path / "f.npz")
    for f, d in zip(back.maps, dense.maps, strict=True):
        assert isinstance(f, FramesMap) and f.sizes == SIZES and f.per_row == PER_ROW
        np.testing.assert_array_equal(f.array(), d.array())


@pytest.mark.parametrize(
    "name,value",
    [("attn_000_sizes.npy", np.array([5, 9, 4, 8])), ("attn_000_sizes.npy", np.array([5, 9, 0, 7]))]
    + [("attn_000_frames.npy", np.array([2, 1])), ("attn_000_keys.npy", np.array(10**9))],
)
def test_sizes_that_do_not_fit_the_maps_are_one_line(pair, tmp_path, name, value):
    io.save_npz(pair[0], tmp_path / "f.npz")
    bad = tmp_path / "bad.npz"
    with zipfile.ZipFile(tmp_path / "f.npz") as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.namelist():
            if item != name:
                dst.writestr(item, src.read(item))
        with dst.open(name, "w") as f:
            np.lib.format.write_array(f, value)
    with pytest.raises(
        AttnvizError, match=r"attn_000 \[\d+\] \(32-bit floats\) is not 3 heads of the frames attn_000_sizes"
    ) as e:
        io.load_npz(bad)
    assert "\n" not in str(e.value) and "extract the maps again" in str(e.value)


def test_one_row_keeps_its_frames_and_its_padding(pair, tmp_path):
    from attnviz.core.rows import pick_row

    frames, dense = (pick_row(r, 1) for r in pair)
    for f, d, whole in zip(frames.maps, dense.maps, pair[0].maps, strict=True):
        assert isinstance(f, FramesMap) and f.sizes == [7] and f.shape == d.shape == (1, HEADS, SIDE, SIDE)
        assert np.shares_memory(f.blocks, whole.blocks)  # a view of the batch's buffer, no copy
        np.testing.assert_array_equal(f.array(), d.array())
    io.save_npz(frames, tmp_path / "row.npz")
    np.testing.assert_array_equal(io.load_npz(tmp_path / "row.npz").maps[0].array(), dense.maps[0].array())


def test_a_nan_in_a_frame_is_refused_in_one_line():
    from attnviz.runtime.analyze import refuse_non_finite

    each = frames_each()[0]
    each[2] = each[2].copy()
    each[2][1, 2, 3] = np.nan
    r = result([FramesMap.of(each, PER_ROW), FramesMap.of(frames_each(1)[1], PER_ROW)])
    with pytest.raises(AttnvizError, match="NaN/Inf attention at"):
        refuse_non_finite(r)


@pytest.mark.parametrize("mode", ["head", "mean"])
def test_token_links_are_the_head_maps_frame(pair, mode, never_laid_out):
    """Token links of a tower's frames: the links of the Head map's frame, its block of the dense map."""
    frames, dense = pair
    sel = v.Selection(mode=mode, layer=1, head=2, layer_lo=1, layer_hi=1, frame=1)
    lv = v.links_view(frames, sel)
    want = v.compute_map(dense, sel).matrix[5:14, 5:14]
    assert len(lv.items) == 1 and lv.q_labels == v.compute_map(dense, sel).q_labels[5:14]
    np.testing.assert_array_equal(lv.items[0][2], want)
    assert "image 2" in lv.title
