"""A multi-frame tower's maps kept as its frames' maps (:class:`attnviz.core.frames.FramesMap`): every head, every
thumbnail, every head aggregate and rollout, and the ``.npz`` round trip give what the block-diagonal map they stand
for gives (made here by the runtime's own :func:`block_diagonal`, as the dense path made it), without making it."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest
from frames_by_hand import per_frame_first_prev, per_frame_sink_share

from attnviz import AttnvizError
from attnviz.core import io
from attnviz.core import view as v
from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
from attnviz.core.frames import FramesMap
from attnviz.core.view.selection import frames_reduction
from attnviz.runtime.vlm_families import block_diagonal

HEADS, P, LAYERS = 3, 9, 2
PER_ROW = [2, 4]  # a padded batch: row 0 has 2 frames and 2 frames' padding after them


def frames_maps(per_row=PER_ROW, seed=0) -> list[np.ndarray]:
    """Each layer's frames' maps ``[frames, H, P, P]``, rows summing to 1 (softmax of random scores)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(LAYERS):
        s = rng.normal(size=(sum(per_row), HEADS, P, P)) * 3
        e = np.exp(s - s.max(-1, keepdims=True))
        out.append((e / e.sum(-1, keepdims=True)).astype(np.float32))
    return out


def result(maps: list) -> AttentionResult:
    sites = [SiteInfo("encoder", "self", i, HEADS, f"n{i}", "softmax") for i in range(LAYERS)]
    n = max(PER_ROW) * P
    special = [i == 0 for i in range(n)]  # one special key, so "hide special tokens" changes the numbers
    return AttentionResult(maps=maps, sites=sites, tokens=TokenAxis([f"p{i}" for i in range(n)], special))


@pytest.fixture(scope="module")
def pair() -> tuple[AttentionResult, AttentionResult]:
    """The same maps as frames and as the dense block-diagonal maps."""
    each = frames_maps()
    return (
        result([FramesMap(a, PER_ROW) for a in each]),
        result([DenseMap(block_diagonal(a, PER_ROW)) for a in each]),
    )


def test_heads_and_array_are_the_block_diagonal_map(pair):
    frames, dense = pair
    for f, d in zip(frames.maps, dense.maps, strict=True):
        assert f.shape == d.shape == (2, HEADS, 4 * P, 4 * P)
        assert f.nbytes == sum(PER_ROW) * HEADS * P * P * 4 and io.written_bytes(f) == f.nbytes
        np.testing.assert_array_equal(f.array(), d.array())
        for b in range(2):
            for h in range(HEADS):
                np.testing.assert_array_equal(f.head(b, h), d.head(b, h))


@pytest.mark.parametrize("side", [4, 7, 36, 64])
def test_pooled_thumbnails_are_the_dense_maps_pooled(pair, side):
    frames, dense = pair
    for f, d in zip(frames.maps, dense.maps, strict=True):
        for b in range(2):
            for n_q, n_k in ((36, 36), (30, 36), (36, 11), (5, 5)):
                want = v.downsample(d.array()[b, :, :n_q, :n_k], side)
                np.testing.assert_array_equal(f.pooled(b, n_q, n_k, side), want)


@pytest.mark.parametrize("mode", v.MODES)
@pytest.mark.parametrize("batch", [0, 1])
@pytest.mark.parametrize("layers", [(0, 0), (0, 1), (1, 1)])
def test_every_aggregate_is_the_dense_ones(pair, mode, batch, layers):
    """Head, mean / max / min over heads and rollout, over each layer range, on a row with padding and one
    without: the frames' blocks reduced one by one and laid out equal the dense map reduced whole."""
    frames, dense = pair
    sel = v.Selection(mode=mode, layer=layers[1], head=2, layer_lo=layers[0], layer_hi=layers[1], batch=batch)
    got, what = v.head_matrix(frames.blocks(batch)[0], sel)
    want, want_what = v.head_matrix(dense.blocks(batch)[0], sel)
    assert what == want_what and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 if mode == "rollout" else 0)


@pytest.mark.parametrize("hide,keep", [(False, 1.0), (True, 1.0), (False, 0.6), (True, 0.5)])
def test_thumbnails_and_the_heatmap_are_the_dense_ones(pair, hide, keep):
    frames, dense = pair
    for batch in (0, 1):
        sel = v.Selection(mode="mean", hide_special=hide, keep=keep, batch=batch)
        got = v.thumbnails(frames, sel, use_cache=False)
        want = v.thumbnails(dense, sel, use_cache=False)
        assert got.keys() == want.keys()
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
        np.testing.assert_array_equal(v.compute_map(frames, sel).matrix, v.compute_map(dense, sel).matrix)


def test_the_npz_keeps_the_frames_maps_and_reads_back_the_same_maps(pair, tmp_path):
    frames, dense = pair
    io.save_npz(frames, tmp_path / "f.npz")
    io.save_npz(dense, tmp_path / "d.npz")
    with np.load(tmp_path / "f.npz") as z:  # the frames' own maps and each row's count, nothing laid out
        assert z["attn_000"].shape == (sum(PER_ROW), HEADS, P, P) and z["attn_000_frames"].tolist() == PER_ROW
        np.testing.assert_array_equal(z["attn_001"], frames.maps[1].blocks)
    back, back_dense = io.load_npz(tmp_path / "f.npz"), io.load_npz(tmp_path / "d.npz")
    assert all(isinstance(m, FramesMap) and m.per_row == PER_ROW for m in back.maps)
    for f, d in zip(back.maps, back_dense.maps, strict=True):
        np.testing.assert_array_equal(f.array(), d.array())
    assert (tmp_path / "f.npz").stat().st_size < (tmp_path / "d.npz").stat().st_size / 2


@pytest.mark.parametrize(
    "counts,why", [([2, 3], "add up"), ([6, 0], "no frames"), ([[2, 4]], "not a list"), ([2.0, 4.0], "floats")]
)
def test_a_frame_count_that_does_not_fit_is_one_line(pair, tmp_path, counts, why):
    frames, _ = pair
    good = tmp_path / "f.npz"
    io.save_npz(frames, good)
    bad = tmp_path / "bad.npz"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.namelist():
            if item == "attn_000_frames.npy":
                with dst.open(item, "w") as f:
                    np.lib.format.write_array(f, np.array(counts))
            else:
                dst.writestr(item, src.read(item))
    with pytest.raises(AttnvizError, match="does not count the 6 frames' maps of attn_000") as e:
        io.load_npz(bad)
    assert "\n" not in str(e.value) and "extract the maps again" in str(e.value)


def test_frame_counts_that_do_not_fit_the_maps_are_refused():
    with pytest.raises(ValueError, match="do not add up"):
        FramesMap(frames_maps()[0], [2, 3])


def test_one_row_of_a_padded_batch_keeps_its_frames_and_its_padding(pair, tmp_path):
    """pick_row (a figure of one row): row 0's 2 frames over the batch's 4 frames' keys, as the dense row is, and
    an .npz of it reads back the same (its keys kept: attn_NNN_keys)."""
    from attnviz.core.rows import pick_row

    frames, dense = (pick_row(r, 0) for r in pair)
    for f, d in zip(frames.maps, dense.maps, strict=True):
        assert isinstance(f, FramesMap) and f.per_row == [2] and f.shape == d.shape == (1, HEADS, 4 * P, 4 * P)
        np.testing.assert_array_equal(f.array(), d.array())
    for mode in ("mean", "rollout"):
        sel = v.Selection(mode=mode, layer_hi=1)
        got, want = v.head_matrix(frames.blocks()[0], sel)[0], v.head_matrix(dense.blocks()[0], sel)[0]
        np.testing.assert_allclose(got, want, atol=1e-6)
    io.save_npz(frames, tmp_path / "row.npz")
    with np.load(tmp_path / "row.npz") as z:
        assert z["attn_000_keys"] == 4 * P and z["attn_000"].shape == (2, HEADS, P, P)
    back = io.load_npz(tmp_path / "row.npz")
    np.testing.assert_array_equal(back.maps[0].array(), dense.maps[0].array())
    bad = tmp_path / "bad.npz"
    with zipfile.ZipFile(tmp_path / "row.npz") as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.namelist():
            if item == "attn_000_keys.npy":
                with dst.open(item, "w") as f:
                    np.lib.format.write_array(f, np.array(10**9))  # each head would be laid out over 10⁹ keys
            else:
                dst.writestr(item, src.read(item))
    with pytest.raises(AttnvizError, match="attn_000_keys is not a count of keys of at most 1024 frames of 9"):
        io.load_npz(bad)


@pytest.mark.parametrize("mode", v.MODES)
@pytest.mark.parametrize("batch", [0, 1])
def test_row_sums_are_the_laid_out_maps_rows_summed(pair, mode, batch):
    """What Image regions reads (one row, the mean of a run of rows, padding rows included: row 0's last two
    frames' keys are its padding, and rollout makes the identity of them) from the blocks those rows lie in, the
    same numbers as the dense map's rows added up."""
    frames, dense = pair
    sel = v.Selection(mode=mode, layer=1, head=2, layer_lo=0, layer_hi=1, batch=batch)
    fn, layers = frames_reduction(frames.blocks(batch)[0], sel)
    want = v.head_matrix(dense.blocks(batch)[0], sel)[0]
    for lo, hi in ((0, 1), (P + 4, P + 5), (3, 2 * P + 5), (0, 4 * P), (2 * P + 1, 3 * P), (35, 40), (-2, 3)):
        got = layers[0].row_sum(batch, lo, hi, fn, layers)
        np.testing.assert_allclose(
            got, want[max(lo, 0) : hi].sum(axis=0), rtol=0, atol=1e-6 if mode == "rollout" else 0
        )


@pytest.mark.parametrize("batch", [0, 1])
def test_head_stats_frame_by_frame_are_the_laid_out_heads(pair, batch):
    """The stats table's numbers of each head, frame by frame (a padded row's zero rows, the special key 0),
    the laid-out head's :func:`head_stats` up to float64 rounding; "first" and "prev" each frame's, by hand."""
    from attnviz.core.stats import block_head_stats, head_stats

    frames, dense = pair
    fb, db = frames.blocks(batch)[0], dense.blocks(batch)[0]
    special = np.asarray(db.key_axis.special, bool)
    for layer in range(LAYERS):
        for h in range(HEADS):
            got, want = block_head_stats(fb, layer, h), head_stats(db.head(layer, h), special)
            assert got.keys() == want.keys()
            want["first"], want["prev"] = per_frame_first_prev(db.head(layer, h), [P] * PER_ROW[batch])
            want["sink_share"] = per_frame_sink_share(db.head(layer, h), [P] * PER_ROW[batch])
            for k in want:
                assert got[k] == pytest.approx(want[k], rel=1e-12, abs=1e-15), k
            assert block_head_stats(db, layer, h) == head_stats(db.head(layer, h), special)  # any other map: as before
