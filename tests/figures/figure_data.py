"""Synthetic attention results for figure tests (no model, no runtime): softmax of structured logits.

A module of its own, not conftest.py: ``from conftest import`` picks whichever conftest.py was imported first
when several test folders (figures and gui) run in one pytest call."""

from __future__ import annotations

import numpy as np

from attnviz.core.attention import AttentionResult, DenseMap, PatchGrid, SiteInfo, TokenAxis


def softmax_maps(rng, heads, tq, tk, causal=False, shift=0):
    logits = rng.normal(0, 1.5, size=(1, heads, tq, tk))
    for h in range(heads):  # give each head a recognisable pattern
        for i in range(tq):
            j = min(tk - 1, max(0, i + shift + (h % 3) - 1))
            logits[0, h, i, j] += 3.0
    if causal:
        mask = np.triu(np.ones((tq, tk), bool), k=1 + (tk - tq))
        logits[:, :, mask] = -np.inf
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


def _axis(words, special=("[CLS]", "[SEP]", "<s>", "</s>", "<pad>")):
    return TokenAxis(list(words), [w in special for w in words])


TEXT_TOKENS = ["[CLS]", "the", "cat", "sat", "on", "the", "mat", "$5", "[SEP]"]
SOURCE = ["<s>", "das", "Haus", "ist", "klein", "</s>"]
TARGET_GEN = ["the", "house", "is", "small", "</s>"]
CAPTION = ["a", "red", "square", "</s>"]


LONG_WORDS = ["the", "cat", "sat", "on", "a", "mat", "$5"]
LONG_SPECIAL = {"[CLS]", "[SEP]"}


def long_tokens(n: int = 1200) -> list[str]:
    """A long sentence: [CLS], ``n`` words, [SEP], and a [SEP] mid-sequence at position 500 (hidden with the
    special tokens, the positions after it keep their numbers)."""
    toks = ["[CLS]"] + [LONG_WORDS[i % len(LONG_WORDS)] for i in range(n)] + ["[SEP]"]
    toks[500] = "[SEP]"
    return toks


def text_result(n_layers=2, heads=3, tokens=TEXT_TOKENS, seed=0):
    rng = np.random.default_rng(seed)
    t = len(tokens)
    maps = [DenseMap(softmax_maps(rng, heads, t, t)) for _ in range(n_layers)]
    sites = [SiteInfo("encoder", "self", i, heads, f"softmax_{i}", "softmax") for i in range(n_layers)]
    return AttentionResult(maps, sites, tokens=_axis(tokens), info={"model": "/models/tiny-bert.onnx"})


def encdec_result(seed=1, full=True):
    """Translation: encoder over SOURCE, decoder prompt <s> + generated TARGET_GEN."""
    rng = np.random.default_rng(seed)
    dec = ["<s>"] + TARGET_GEN if full else ["<s>"] + TARGET_GEN[:-1]
    ts, td = len(SOURCE), len(dec)
    maps, sites = [], []
    for i in range(2):
        maps.append(DenseMap(softmax_maps(rng, 2, ts, ts)))
        sites.append(SiteInfo("encoder", "self", i, 2, f"enc{i}", "softmax"))
    for i in range(2):
        maps.append(DenseMap(softmax_maps(rng, 2, td, td, causal=True)))
        sites.append(SiteInfo("decoder", "self", i, 2, f"dself{i}", "softmax"))
        maps.append(DenseMap(softmax_maps(rng, 2, td, ts, shift=1)))
        sites.append(SiteInfo("decoder", "cross", i, 2, f"dcross{i}", "softmax"))
    return AttentionResult(
        maps,
        sites,
        tokens=_axis(SOURCE),
        key_tokens=_axis(dec),
        generated=list(TARGET_GEN),
        prompt_len=1,
        info={"model": "tiny-translate"},
    )


def test_image(h=64, w=64):
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.zeros((h, w, 3), np.uint8)
    img[..., 0] = (xx * 255 // w).astype(np.uint8)
    img[..., 1] = (yy * 255 // h).astype(np.uint8)
    img[16:40, 20:48] = (220, 30, 30)
    return img


test_image.__test__ = False  # a helper, not a test


def vision_result(seed=2, decoder=False):
    rng = np.random.default_rng(seed)
    grid = PatchGrid(4, 4, 1)
    tk = grid.offset + grid.n
    enc = ["[CLS]"] + [f"p{i}" for i in range(grid.n)]
    maps = [DenseMap(softmax_maps(rng, 2, tk, tk)) for _ in range(2)]
    sites = [SiteInfo("encoder", "self", i, 2, f"vit{i}", "softmax") for i in range(2)]
    kw = {}
    if decoder:
        dec = ["<s>"] + CAPTION
        td = len(dec)
        for i in range(2):
            maps.append(DenseMap(softmax_maps(rng, 2, td, td, causal=True)))
            sites.append(SiteInfo("decoder", "self", i, 2, f"ds{i}", "softmax"))
            maps.append(DenseMap(softmax_maps(rng, 2, td, tk)))
            sites.append(SiteInfo("decoder", "cross", i, 2, f"dc{i}", "softmax"))
        kw = dict(key_tokens=_axis(dec), generated=list(CAPTION), prompt_len=1)
    return AttentionResult(
        maps,
        sites,
        tokens=TokenAxis(enc, [True] + [False] * grid.n),
        patch_grid=grid,
        image=test_image(),
        info={"model": "tiny-vit"},
        **kw,
    )
