"""The Qt-free selection logic every view and export shares."""

import numpy as np
import pytest

from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
from attnviz.gui.selection import Selection, alignment_rows, clamp, compute_map, downsample, step_rows


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.fixture
def encdec():
    rng = np.random.default_rng(0)
    S, P, G = 5, 1, 4  # source, prompt, generated
    T = P + G - 1  # the runtime feeds prompt + generated[:-1]
    maps, sites = [], []
    for i in range(2):
        maps.append(DenseMap(softmax(rng.normal(size=(1, 3, S, S)))))
        sites.append(SiteInfo("encoder", "self", i, 3, f"e{i}", "softmax"))
    for i in range(2):
        maps.append(DenseMap(softmax(rng.normal(size=(1, 3, T, T)))))
        sites.append(SiteInfo("decoder", "self", i, 3, f"d{i}", "softmax"))
        maps.append(DenseMap(softmax(rng.normal(size=(1, 3, T, S)))))
        sites.append(SiteInfo("decoder", "cross", i, 3, f"c{i}", "softmax"))
    src = TokenAxis(["<s>", "a", "b", "c", "</s>"], [True, False, False, False, True])
    dec = TokenAxis(["<s>", "x", "y", "z"], [True, False, False, False])
    return AttentionResult(maps, sites, tokens=src, key_tokens=dec, generated=["x", "y", "z", "</s>"], prompt_len=P)


def test_head_and_aggregates(encdec):
    blocks = encdec.blocks()
    assert [b.name for b in blocks] == ["encoder self-attention", "decoder self-attention", "decoder cross-attention"]
    mv = compute_map(encdec, Selection(block=0, layer=1, head=2), blocks)
    np.testing.assert_allclose(mv.matrix, encdec.maps[1].array()[0, 2])
    assert mv.q_labels == ["<s>", "a", "b", "c", "</s>"]
    mean = compute_map(encdec, Selection(block=0, mode="mean", layer_lo=0, layer_hi=1), blocks).matrix
    both = np.concatenate([encdec.maps[0].array()[0], encdec.maps[1].array()[0]])
    np.testing.assert_allclose(mean, both.mean(0), rtol=1e-6)
    mx = compute_map(encdec, Selection(block=0, mode="max", layer_lo=1, layer_hi=1), blocks).matrix
    np.testing.assert_allclose(mx, encdec.maps[1].array()[0].max(0))
    ro = compute_map(encdec, Selection(block=0, mode="rollout"), blocks).matrix
    np.testing.assert_allclose(ro.sum(-1), 1.0, rtol=1e-5)
    with pytest.raises(ValueError, match="rollout needs self-attention"):
        compute_map(encdec, Selection(block=2, mode="rollout"), blocks)


def test_filters(encdec):
    mv = compute_map(encdec, Selection(block=0, hide_special=True))
    assert mv.q_labels == ["a", "b", "c"] and mv.k_labels == ["a", "b", "c"]
    np.testing.assert_allclose(mv.matrix.sum(-1), 1.0, rtol=1e-5)
    kept = compute_map(encdec, Selection(block=0, keep=0.5)).matrix
    full = compute_map(encdec, Selection(block=0)).matrix
    assert (kept > 0).sum() < (full > 0).sum()
    assert np.all(kept.sum(-1) >= 0.5 * full.sum(-1) - 1e-6)


def test_steps_and_alignment(encdec):
    blocks = encdec.blocks()
    cross = blocks[2]
    rows, words = alignment_rows(encdec, cross)
    # token k was chosen by decoder row prompt_len - 1 + k; the last one (</s>) by row 3
    assert rows.tolist() == [0, 1, 2, 3] and words == ["x", "y", "z", "</s>"]
    assert step_rows(encdec, cross, 0) == 1
    assert step_rows(encdec, cross, 2) == 3
    assert step_rows(encdec, cross, -1) is None
    assert step_rows(encdec, blocks[0], 1) is None  # encoder rows never change
    mv = compute_map(encdec, Selection(block=1, step=1), blocks)
    assert mv.matrix.shape == (2, 2)
    mv = compute_map(encdec, Selection(block=2, step=1), blocks)
    assert mv.matrix.shape == (2, 5)


def test_clamp_and_downsample(encdec):
    blocks = encdec.blocks()
    s = clamp(Selection(block=9, layer=9, head=9), blocks)
    assert (s.block, s.layer, s.head) == (2, 1, 2)
    a = np.zeros((3, 130, 70), np.float32)
    a[1, 129, 69] = 1
    d = downsample(a, 64)
    assert d.shape == (3, 44, 35) and d[1].max() == 1.0  # max-pool keeps peaks
