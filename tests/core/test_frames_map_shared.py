"""Rows sharing one tower run's frames (:meth:`attnviz.core.frames.FramesMap.shared`: a beam search's K beams over
one image): every row reads what the one-row map's laid-out block-diagonal map holds (laid out here by hand),
through one set of arrays; the ``.npz`` keeps the frames once and each row's group (``attn_NNN_rows``), read back
the same; a rows entry a file from elsewhere makes up is refused in one line."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest
from frames_by_hand import block_diagonal_by_hand

from attnviz import AttnvizError
from attnviz.core import io
from attnviz.core import view as v
from attnviz.core.attention import AttentionResult, SiteInfo, TokenAxis
from attnviz.core.frames import FramesMap
from attnviz.core.rows import pick_row

HEADS, K = 3, 4


def softmax(rng, shape) -> np.ndarray:
    s = rng.normal(size=shape) * 3
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


def one_row(sized: bool) -> FramesMap:
    """One image's tower run: 3 frames of 6 patches, or frames of 5, 8 and 3 patches (a flat buffer)."""
    rng = np.random.default_rng(1)
    if not sized:
        return FramesMap(softmax(rng, (3, HEADS, 6, 6)), [3])
    return FramesMap.of([softmax(rng, (HEADS, p, p)) for p in (5, 8, 3)], [3])


@pytest.mark.parametrize("sized", [False, True])
def test_every_row_reads_the_one_runs_block_diagonal_map_from_one_set_of_arrays(sized):
    one = one_row(sized)
    frames = [one.frames(0)[f] for f in range(3)]
    side = sum(f.shape[-1] for f in frames)
    want = block_diagonal_by_hand(frames, [3], side)[0]  # [H, T, T]
    m = one.shared(K)
    assert m.shape == (K, *want.shape) and m.rows == [0] * K and m.per_row == [3] * K and m.groups == [3]
    assert m.nbytes == one.nbytes and m.blocks is one.blocks  # the frames once, not K copies
    for b in range(K):
        np.testing.assert_array_equal(m.array()[b], want)
        np.testing.assert_array_equal(m.row(b).array()[0], want)
        assert all(np.shares_memory(f, one.blocks) for f in m.frames(b))
    with pytest.raises(ValueError, match="only a one-row map"):
        FramesMap(np.concatenate([one_row(False).blocks] * 2), [3, 3]).shared(2)
    with pytest.raises(ValueError, match="outside the 1 groups"):
        FramesMap(one_row(False).blocks, [3], rows=[0, 1])


def beams_result(sized: bool) -> AttentionResult:
    m = one_row(sized).shared(K)
    n = m.shape[2]
    sites = [SiteInfo("encoder", "self", 0, HEADS, "n0", "softmax")]
    return AttentionResult(maps=[m], sites=sites, tokens=TokenAxis([f"p{i}" for i in range(n)], [False] * n))


@pytest.mark.parametrize("sized", [False, True])
def test_the_npz_keeps_the_frames_once_and_reads_back_every_rows_map(sized, tmp_path):
    r = beams_result(sized)
    path = io.save_npz(r, tmp_path / "b.npz")
    with np.load(path) as z:
        assert z["attn_000_frames"].tolist() == [3] and z["attn_000_rows"].tolist() == [0] * K
        assert z["attn_000"].nbytes == r.maps[0].nbytes
    back = io.load_npz(path)
    m = back.maps[0]
    assert isinstance(m, FramesMap) and m.rows == [0] * K and m.shape == r.maps[0].shape
    for b in range(K):
        np.testing.assert_array_equal(pick_row(back, b).maps[0].array(), r.maps[0].array()[b : b + 1])
        sel = v.Selection(mode="mean", layer=0, batch=b)
        np.testing.assert_allclose(
            v.head_matrix(back.blocks(b)[0], sel)[0], r.maps[0].array()[b].mean(axis=0), atol=1e-6
        )


@pytest.mark.parametrize(
    "rows",
    [[0, 1], [-1], [[0, 0]], [0.0, 0.0], [], [0] * (io.MAX_SHARED_ROWS + 1)],
    ids=["another group", "negative", "2-D", "floats", "none", "too many"],
)
@pytest.mark.parametrize("sized", [False, True])
def test_a_rows_entry_that_names_no_group_is_one_line(sized, rows, tmp_path):
    good = io.save_npz(beams_result(sized), tmp_path / "good.npz")
    bad = tmp_path / "bad.npz"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.namelist():
            if item == "attn_000_rows.npy":
                with dst.open(item, "w") as f:
                    np.lib.format.write_array(f, np.array(rows))
            else:
                dst.writestr(item, src.read(item))
    with pytest.raises(AttnvizError, match="attn_000_rows .* does not name, for at most 4,096 rows, one of the 1") as e:
        io.load_npz(bad)
    assert "\n" not in str(e.value) and "extract the maps again" in str(e.value)
