"""The Overview of a tower's frames with "keep mass" or "hide special tokens": pooled band by band from the frames'
maps (never a whole head laid out), bit for bit the thumbnails of the same maps held dense and laid out whole.

Frames of one size and of several, a padded batch (its padding dropped), special tokens at the start and inside a
frame (every later row and key moves up one: cells straddle frame borders), tied weights (keep mass's sort), and
thumbnail sides that make one-row cells, several-row cells and a short last cell."""

from __future__ import annotations

import numpy as np
import pytest
from frames_by_hand import block_diagonal_by_hand

from attnviz.core import view as v
from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
from attnviz.core.frames import FramesMap

HEADS, LAYERS = 2, 2
PER_ROW = [2, 3]  # row 0: 2 frames and padding after them (of either SIZES)


def softmax_frames(sizes: list[int], seed: int, ties: bool) -> list[np.ndarray]:
    """Each frame's ``[H, P_f, P_f]``, rows summing to 1; ``ties``: scores rounded so that many weights are equal."""
    rng = np.random.default_rng(seed)
    out = []
    for p in sizes:
        s = rng.normal(size=(HEADS, p, p)) * 3
        s = np.round(s) if ties else s
        e = np.exp(s - s.max(-1, keepdims=True))
        out.append((e / e.sum(-1, keepdims=True)).astype(np.float32))
    return out


def pair(sizes: list[int], special: list[int], ties: bool) -> tuple[AttentionResult, AttentionResult]:
    """The same maps as a FramesMap per layer and as the dense block-diagonal maps."""
    side = max(sum(sizes[:2]), sum(sizes[2:]))
    each = [softmax_frames(sizes, seed, ties) for seed in range(LAYERS)]
    sites = [SiteInfo("encoder", "self", i, HEADS, f"n{i}", "softmax") for i in range(LAYERS)]
    tokens = TokenAxis([f"p{i}" for i in range(side)], [i in special for i in range(side)])
    frames = AttentionResult([FramesMap.of(layer, PER_ROW) for layer in each], sites, tokens)
    dense = AttentionResult([DenseMap(block_diagonal_by_hand(layer, PER_ROW, side)) for layer in each], sites, tokens)
    return frames, dense


SIZES = {"one size": [12, 12, 12, 12, 12], "several sizes": [9, 12, 7, 12, 6]}
SPECIAL = {"none": [], "first": [0], "first and inside a frame": [0, 10, 11]}


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("special", SPECIAL)
@pytest.mark.parametrize("ties", [False, True])
def test_filtered_thumbnails_are_the_laid_out_ones(sizes, special, ties, never_laid_out):
    frames, dense = pair(SIZES[sizes], SPECIAL[special], ties)
    assert all(isinstance(m, FramesMap) and m.uniform == (sizes == "one size") for m in frames.maps)
    for hide, keep in ((True, 1.0), (False, 0.5), (True, 0.5), (False, 0.9)):
        for batch in (0, 1):
            for side in (5, 8, 64):  # cells of several rows with a short last one, ..., one row a cell
                sel = v.Selection(mode="mean", hide_special=hide, keep=keep, batch=batch)
                got = v.thumbnails(frames, sel, side, use_cache=False)
                want = v.thumbnails(dense, sel, side, use_cache=False)
                assert got.keys() == want.keys()
                for k in want:
                    assert got[k].shape == want[k].shape, (hide, keep, batch, side, k)
                    np.testing.assert_array_equal(got[k], want[k], err_msg=f"{hide} {keep} {batch} {side} {k}")


def test_the_filters_change_the_thumbnails_here(never_laid_out):
    """The maps above are ones the filters change (else equality would say nothing about them)."""
    frames, _ = pair(SIZES["several sizes"], SPECIAL["first and inside a frame"], False)
    plain = v.thumbnails(frames, v.Selection(mode="mean", batch=1), 8, use_cache=False)
    for sel in (v.Selection(mode="mean", batch=1, keep=0.5), v.Selection(mode="mean", batch=1, hide_special=True)):
        got = v.thumbnails(frames, sel, 8, use_cache=False)
        assert any(not np.array_equal(got[k], plain[k]) for k in plain)


def test_head_rows_are_the_laid_out_heads_rows():
    frames, dense = pair(SIZES["several sizes"], [], False)
    for f, d in zip(frames.maps, dense.maps, strict=True):
        for b in (0, 1):
            rows = np.array([0, 3, 8, 9, 15, 24])
            for n_k in (25, 14):
                np.testing.assert_array_equal(f.head_rows(b, 1, rows, n_k), d.array()[b, 1][rows, :n_k])
