"""core/patch_names.py: one name for a patch whether the tower's key or a VLM decoder's image token carries it, and
every label written before (the tower's ``t1(0,4)`` before session 19; a decoder's ``t1[0,4]``, ``g[0,4]``,
``img[0,4]`` before session 20) read as today's.  Expectations written here by hand from the naming rule."""

from __future__ import annotations

import pytest

from attnviz.core.patch_names import canonical, patch_name


@pytest.mark.parametrize(
    "args, want",
    [
        ((0, 4), "(0,4)"),
        ((0, 4, 1), "tile 1·(0,4)"),
        ((2, 3, None, 2), "img2(2,3)"),
        ((0, 0, 0, 2), "img2·tile 0·(0,0)"),
    ],
)
def test_patch_name(args, want):
    assert patch_name(*args) == want


@pytest.mark.parametrize(
    "old, now",
    [
        ("t1(0,4)", "tile 1·(0,4)"),  # the tower, before session 19
        ("img2.t0(0,0)", "img2·tile 0·(0,0)"),
        ("t1[0,4]", "tile 1·(0,4)"),  # Idefics3's decoder, before session 20
        ("g[3,2]", "(3,2)"),
        ("img1.t0[0,1]", "img1·tile 0·(0,1)"),
        ("img2.g[2,2]", "img2(2,2)"),
        ("img[5,6]", "(5,6)"),  # LLaVA's, Qwen2-VL's, PaliGemma's decoder, before session 20
        ("img12[0,3]", "img12(0,3)"),
    ],
)
def test_old_labels_read_as_todays(old, now):
    assert canonical(old) == now
    assert canonical(now) == now  # today's labels unchanged


@pytest.mark.parametrize("label", ["[0,4]", "cat", "[CLS]", "img1[CLS]", "g", "t1", "img.g[0,0]", "xg[0,0]", "[12]"])
def test_other_labels_are_left_alone(label):
    assert canonical(label) == label
