"""A vision–language decoder's encoder is its vision tower: its block reads "vision self-attention" in the window's
block lists and titles, while a captioner's or a text model's encoder keeps "encoder".  The command line and
recipes keep the short name they always had ("encoder self") and take the shown one too ("vision self")."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz import AttnvizError
from attnviz.core import AttentionResult, DenseMap, PatchGrid, SiteInfo
from attnviz.figures.select import block_label, resolve_block


def _maps(b, h, tq, tk):
    return DenseMap(np.full((b, h, tq, tk), 1.0 / tk, np.float32))


def _vlm() -> AttentionResult:
    """A LLaVA-like result: a 2 x 2 patch vision tower, then a decoder of 7 keys whose keys 1..4 are the image."""
    sites = [SiteInfo("encoder", "self", 0, 2, "v", "softmax"), SiteInfo("decoder", "self", 0, 2, "d", "softmax")]
    r = AttentionResult([_maps(1, 2, 4, 4), _maps(1, 2, 7, 7)], sites, patch_grid=PatchGrid(2, 2))
    r.token_grid = PatchGrid(2, 2, 1)  # what makes it a vision–language decoder (runtime/vlm.py sets it)
    return r


def test_a_vlm_shows_its_vision_tower_as_vision():
    assert [b.name for b in _vlm().blocks()] == ["vision self-attention", "decoder self-attention"]


def test_other_models_keep_encoder():
    sites = [SiteInfo("encoder", "self", 0, 2, "e", "softmax"), SiteInfo("decoder", "cross", 0, 2, "c", "softmax")]
    captioner = AttentionResult([_maps(1, 2, 5, 5), _maps(1, 2, 3, 5)], sites, patch_grid=PatchGrid(2, 2, 1))
    assert [b.name for b in captioner.blocks()] == ["encoder self-attention", "decoder cross-attention"]
    text = AttentionResult([_maps(1, 2, 3, 3)], sites[:1])
    assert [b.name for b in text.blocks()] == ["encoder self-attention"]


@pytest.mark.parametrize("name", ["encoder self", "vision self", "vision self-attention", "vision", "0"])
def test_the_vision_block_is_found_by_its_old_and_its_shown_name(name):
    r = _vlm()
    assert resolve_block(r, name)[0] == 0
    assert block_label(r.blocks()[0]) == "encoder self"  # recipes written before keep resolving to the same block


def test_an_unknown_block_still_lists_the_blocks():
    with pytest.raises(AttnvizError, match=r"no block 'audio'; this model has blocks 0 \(encoder self\)"):
        resolve_block(_vlm(), "audio")
