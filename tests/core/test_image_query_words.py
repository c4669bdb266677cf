"""Image regions' query words (core/view/overlay.py, patches.py), Qt-free: a word written twice is named by its place
("query “a” (word 4)") in the title and the screen's text alike, and the query a generated caption opens on follows
the step shown, a vision–language decoder's as a captioner's (it opened on the first word at the last step)."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult, DenseMap, PatchGrid, SiteInfo, TokenAxis

GRID = PatchGrid(4, 4, 1)  # [CLS] then 16 patches (a captioner's encoder); a VLM's image tokens after <s>
CAPTION = ["a", "man", "on", "a", "horse", "</s>"]  # generated; "a" twice


def _maps(rng, tq, tk, causal=False):
    x = rng.normal(0, 1.5, size=(1, 2, tq, tk))
    if causal:
        x[:, :, np.triu(np.ones((tq, tk), bool), k=1 + tk - tq)] = -np.inf
    e = np.exp(x - x.max(-1, keepdims=True))
    return DenseMap((e / e.sum(-1, keepdims=True)).astype(np.float32))


def _axis(words):
    return TokenAxis(list(words), [w in ("[CLS]", "<s>", "</s>") for w in words])


@pytest.fixture(scope="module")
def captioner():
    """An encoder over [CLS] + 16 patches and a decoder that generated CAPTION from <s> (its cross-attention)."""
    rng = np.random.default_rng(5)
    tk, dec = GRID.end, ["<s>", *CAPTION[:-1]]  # the last word is never fed back
    enc = ["[CLS]"] + [f"p{i}" for i in range(GRID.n)]
    return AttentionResult(
        [_maps(rng, tk, tk), _maps(rng, len(dec), tk)],
        [SiteInfo("encoder", "self", 0, 2, "vit0", "softmax"), SiteInfo("decoder", "cross", 0, 2, "dc0", "softmax")],
        tokens=_axis(enc),
        key_tokens=_axis(dec),
        patch_grid=GRID,
        image=np.zeros((32, 32, 3), np.uint8),
        generated=list(CAPTION),
        prompt_len=1,
    )


PROMPT = ["<s>", *[f"({r},{c})" for r in range(4) for c in range(4)], "describe"]


@pytest.fixture(scope="module")
def vlm():
    """A vision–language decoder: <s>, 16 image tokens, "describe", then CAPTION generated (its self-attention)."""
    rng = np.random.default_rng(6)
    toks = PROMPT + CAPTION[:-1]
    return AttentionResult(
        [_maps(rng, len(toks), len(toks), causal=True)],
        [SiteInfo("decoder", "self", 0, 2, "ds0", "softmax")],
        tokens=_axis(toks),
        token_grid=PatchGrid(4, 4, 1),
        image=np.zeros((32, 32, 3), np.uint8),
        generated=list(CAPTION),
        prompt_len=len(PROMPT),
    )


def test_a_word_written_twice_is_named_by_its_place_in_the_title_and_the_screens_text(captioner):
    blocks = captioner.blocks()
    bi = next(i for i, b in enumerate(blocks) if b.kind == "cross")
    for k, word in enumerate(CAPTION):
        sel = vm.Selection(block=bi, query=k)  # a captioner's word k is chosen at decoder row k (from <s>)
        ov = vm.overlay_view(captioner, sel, (32, 32), blocks)
        place = f" (word {k + 1})" if CAPTION.count(word) > 1 else ""  # by hand: only "a" is written twice
        assert ov.query_label == word and ov.query_text == f"query “{word}”{place}"
        assert ov.title.endswith(ov.query_text)


def test_a_patch_or_the_patches_mean_has_no_place(captioner):
    blocks = captioner.blocks()
    ov = vm.overlay_view(captioner, vm.Selection(block=0, image_from="tower", query=-1), (32, 32), blocks)
    assert ov.query_text == "query “all patches (mean)”"


@pytest.mark.parametrize("which", ["captioner", "vlm"])
def test_the_query_opened_on_follows_the_step_shown(which, request):
    """At step k the view opens on the row that chose word k: for the captioner, word k itself (row k, from <s>);
    for the VLM, the token at row len(PROMPT)-1+k (the prompt's last token chose the first word), the k-th
    choice after the image (its first choice "describe" at row 17)."""
    result = request.getfixturevalue(which)
    blocks = result.blocks()
    for step in range(len(CAPTION)):
        bi, grid, _ = vm.image_source(result, blocks)  # the words' block, as the window passes it
        sel = vm.Selection(block=bi, step=step)
        queries = vm.image_queries(result, blocks[bi], grid)
        i = vm.default_image_query(result, sel, blocks)
        want_row = step if which == "captioner" else len(PROMPT) - 1 + step
        assert queries[i][1] == want_row, (step, queries[i])
        assert queries[i][0] == (CAPTION[step] if which == "captioner" else result.tokens.labels[want_row])
