"""A patch grid is read from a block's key count only where the result is a vision one (core/view/patches.py):
a text of 10 or 101 tokens (3×3 + 1, 10×10 + 1) and a clip of 100 frames (10×10) hold no image, so Image regions,
the figures and Head stats see none; a ViT's keys keep its grid, the one it declares or, without one (a result
saved before grids were kept), the one its count gives beside its image."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult, AudioTrack, DenseMap, PatchGrid, SiteInfo, TokenAxis
from attnviz.core.head_stats import stats_context
from attnviz.runtime.audio import frame_labels
from attnviz.runtime.waveform import WaveSpec

SITE = [SiteInfo("encoder", "self", 0, 1, "/e/0", "softmax")]


def _maps(n: int) -> list[DenseMap]:
    return [DenseMap(np.full((1, 1, n, n), 1.0 / n, np.float32))]


def _check_none(r: AttentionResult) -> None:
    blk = r.blocks()[0]
    assert vm.block_grid(r, blk) is None
    assert vm.image_source(r, r.blocks()) is None
    assert stats_context(r, blk) in ("text", "audio")


@pytest.mark.parametrize("n", [10, 101])
def test_a_text_whose_length_is_a_square_plus_one_has_no_grid(n):
    assert PatchGrid.infer(n) is not None  # the count alone reads as a grid: 3×3 + 1, 10×10 + 1
    _check_none(AttentionResult(_maps(n), SITE, tokens=TokenAxis([f"w{i}" for i in range(n)])))


def test_a_clip_of_100_frames_has_no_grid():
    spec = WaveSpec()
    wave = np.zeros(2 * spec.sampling_rate, np.float32)
    track = AudioTrack([wave], spec.display([wave]), spec.sampling_rate, spec.hop_length, spec.frame_seconds)
    _check_none(AttentionResult(_maps(100), SITE, tokens=TokenAxis(frame_labels(100, spec)), audio=track))


@pytest.mark.parametrize("declared", [True, False])
def test_a_vit_keeps_its_grid(declared):
    """[CLS] + 4×4 patches over a 32×32 image: the grid declared, else the one 17 keys give (offset 1)."""
    toks = ["[CLS]"] + [f"p{i}" for i in range(16)]
    r = AttentionResult(
        _maps(17),
        SITE,
        tokens=TokenAxis(toks),
        patch_grid=PatchGrid(4, 4, 1) if declared else None,
        image=np.zeros((32, 32, 3), np.uint8),
    )
    g = vm.block_grid(r, r.blocks()[0])
    assert (g.rows, g.cols, g.offset) == (4, 4, 1)
    assert vm.image_source(r, r.blocks())[1] == g
    assert stats_context(r, r.blocks()[0]) == "patches"
