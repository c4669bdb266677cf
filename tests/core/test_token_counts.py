"""The Run sidebar's token counts (core/token_counts.py) on padded batches: the mask's 1s are what a row saw."""

from __future__ import annotations

import numpy as np

from attnviz.core.attention import AttentionResult, DenseMap, PatchGrid, SiteInfo, TokenAxis
from attnviz.core.rows import RowAxes, set_row_axes
from attnviz.core.token_counts import MAX_ROWS, token_rows


def _text_batch(masks: list[list[int]]) -> AttentionResult:
    n = len(masks[0])
    maps = np.full((len(masks), 1, n, n), 1.0 / n, np.float32)
    r = AttentionResult([DenseMap(maps)], [SiteInfo("encoder", "self", 0, 1, "e", "softmax")])
    rows = [RowAxes(TokenAxis([f"t{i}" for i in range(n)], pad=[not k for k in m]), None) for m in masks]
    set_row_axes(r, rows)
    return r


def test_a_padded_batch_counts_each_rows_own_tokens():
    masks = [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [0, 1, 1, 1, 1]]  # right- and left-padded rows
    assert dict(token_rows(_text_batch(masks))) == {
        "tokens": " · ".join(f"row {b}: {sum(m)}" for b, m in enumerate(masks))
    }
    same = [[1, 1, 1, 0], [0, 1, 1, 1]]  # padded differently, the same count: one value
    assert dict(token_rows(_text_batch(same))) == {"tokens": "3"}
    many = [[1] * (k + 1) + [0] * (MAX_ROWS + 1 - k) for k in range(MAX_ROWS + 2)]
    value = dict(token_rows(_text_batch(many)))["tokens"]
    assert value.count("row ") == MAX_ROWS and value.endswith(f"({MAX_ROWS + 2} rows)")


def test_a_padded_captioning_batch_counts_words_without_pads():
    cross = np.full((2, 1, 5, 4), 0.25, np.float32)
    enc = np.full((2, 1, 4, 4), 0.25, np.float32)
    sites = [SiteInfo("encoder", "self", 0, 1, "e", "softmax"), SiteInfo("decoder", "cross", 0, 1, "c", "softmax")]
    r = AttentionResult([DenseMap(enc), DenseMap(cross)], sites, prompt_len=5)
    r.patch_grid = PatchGrid(2, 2, 0)
    patches = TokenAxis([f"p{i}" for i in range(4)])
    words = ["<s>", "a", "b", "c", "d"]
    set_row_axes(r, [RowAxes(patches, TokenAxis(words, pad=[not k for k in m])) for m in ([1] * 5, [1, 1, 0, 0, 0])])
    counts = dict(token_rows(r))
    assert counts["text tokens"] == "row 0: 5 in the decoder · row 1: 2 in the decoder"
    assert counts["image tokens"].startswith("4 from the encoder")
    # a beam search's rows are its hypotheses: counted as the beam box names them ("beam 1", not "row 1")
    r.info["beams"] = [{"generated": words[1:]}, {"generated": ["a"]}]
    assert dict(token_rows(r))["text tokens"] == "beam 0: 5 in the decoder · beam 1: 2 in the decoder"


def test_a_padded_batch_gives_each_rows_count_a_line():
    from attnviz.core.token_counts import token_lines

    masks = [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert token_lines(_text_batch(masks)) == [("tokens", ["row 0: 5", "row 1: 3"])]
    assert token_lines(_text_batch([[1, 1, 0], [0, 1, 1]])) == [("tokens", ["2"])]


def test_a_vlm_counts_the_image_grid_not_the_words_before_it():
    """A decoder of 7 keys, "red" then 4 image tokens (a 2 x 2 grid from key 1) then two words: the grid's offset
    is the word before the image, not a token of it."""
    maps = [np.full((1, 1, 4, 4), 0.25, np.float32), np.full((1, 1, 7, 7), 1 / 7, np.float32)]
    sites = [SiteInfo("encoder", "self", 0, 1, "v", "softmax"), SiteInfo("decoder", "self", 0, 1, "d", "softmax")]
    keys = TokenAxis(["red", "img[0,0]", "img[0,1]", "img[1,0]", "img[1,1]", "a", "dog"])
    r = AttentionResult([DenseMap(m) for m in maps], sites, tokens=TokenAxis(["p0", "p1", "p2", "p3"]), key_tokens=keys)
    r.token_grid = PatchGrid(2, 2, 1)
    assert dict(token_rows(r)) == {
        "text tokens": "3 in the decoder",
        "image tokens": "4 in the decoder (2×2) · 4 tokens in the vision tower",
    }
