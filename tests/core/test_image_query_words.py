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
    """At step k the view opens on the row that chose word k: for the captioner row k (from <s>), for the VLM row
    len(PROMPT)-1+k (the prompt's last token chose the first word); either way the choice reads word k itself,
    the row's output (a VLM's choices were named by the token each row reads, "describe" at step 0)."""
    result = request.getfixturevalue(which)
    blocks = result.blocks()
    for step in range(len(CAPTION)):
        bi, grid, _ = vm.image_source(result, blocks)  # the words' block, as the window passes it
        sel = vm.Selection(block=bi, step=step)
        queries = vm.image_queries(result, blocks[bi], grid)
        i = vm.default_image_query(result, sel, blocks)
        want_row = step if which == "captioner" else len(PROMPT) - 1 + step
        assert queries[i][1] == want_row, (step, queries[i])
        assert queries[i][0] == CAPTION[step]


def test_a_vlms_choices_are_named_by_the_word_each_row_produced(vlm):
    """words24: a VLM's text rows are named as a captioner's words are, by their output.  By hand: the prompt's
    last token "describe" (row 17, the first after the 16 image tokens at rows 1..16) chose CAPTION[0], and row
    17 + k chose CAPTION[k]; the rows read "describe", "a", "man", ... (the old names, one word behind)."""
    blocks = vlm.blocks()
    bi, grid, _ = vm.image_source(vlm, blocks)
    queries = vm.image_queries(vlm, blocks[bi], grid)
    assert queries == [(w, len(PROMPT) - 1 + k) for k, w in enumerate(CAPTION)]
    # the title and the screen's text of each choice name the same word
    for k, (word, row) in enumerate(queries):
        ov = vm.overlay_view(vlm, vm.Selection(block=bi, query=row), (32, 32), blocks)
        assert ov.query_label == word == CAPTION[k]
    # a row's tooltip says both: the token it reads and the word it produced
    assert vm.query_tip(vlm, blocks[bi], 17) == "decoder row 17: reads “describe”, produced “a”"
    assert vm.query_tip(vlm, blocks[bi], 18) == "decoder row 18: reads “a”, produced “man”"


def test_a_vlm_run_that_generated_nothing_names_its_last_row_next(vlm):
    """A prompt alone (no word generated): each text row produced the prompt's next token; the last row's word was
    never chosen, so it reads "(next)" (and its tooltip says why), not the token it reads."""
    toks = [*PROMPT, "what", "is"]
    rng = np.random.default_rng(7)
    r = AttentionResult(
        [_maps(rng, len(toks), len(toks), causal=True)],
        [SiteInfo("decoder", "self", 0, 2, "ds0", "softmax")],
        tokens=_axis(toks),
        token_grid=PatchGrid(4, 4, 1),
        image=np.zeros((32, 32, 3), np.uint8),
        prompt_len=len(toks),
    )
    blocks = r.blocks()
    bi, grid, _ = vm.image_source(r, blocks)
    assert vm.image_queries(r, blocks[bi], grid) == [("what", 17), ("is", 18), (vm.NEXT_WORD, 19)]
    assert "reads “is”; the word it produces was not generated" in vm.query_tip(r, blocks[bi], 19)
    # a row that is no choice's (figure --query 0, before the image): named by its output too
    assert vm.overlay_view(r, vm.Selection(block=bi, query=0), (32, 32), blocks).query_label == "(0,0)"


def test_two_choices_with_one_word_differ_on_their_names(captioner, vlm):
    """words24: "a" twice reads "a (1)" and "a (4)" (its place among the choices, the number the title's
    “a” (word 4) gives); every other word as it is; a patch or the patches' mean never gets a number."""
    for result in (captioner, vlm):
        blocks = result.blocks()
        bi, grid, _ = vm.image_source(result, blocks)
        queries = vm.image_queries(result, blocks[bi], grid)
        assert vm.query_names(queries) == ["a (1)", "man", "on", "a (4)", "horse", "</s>"]
        for k, name in enumerate(vm.query_names(queries)):
            ov = vm.overlay_view(result, vm.Selection(block=bi, query=queries[k][1]), (32, 32), blocks)
            if "(" in name:  # the title names the same place
                assert ov.query_text == f"query “{ov.query_label}” (word {name.split('(')[1][:-1]})"
    assert vm.query_names([("x", 3), ("all patches (mean)", -1)]) == ["x", "all patches (mean)"]


def test_the_strips_panels_are_named_as_the_buttons(captioner):
    """The strip (the window's thumbnails, the strip figure) names a word written twice as its button does, numbered
    among all the words even where the step shows fewer."""
    blocks = captioner.blocks()
    bi = next(i for i, b in enumerate(blocks) if b.kind == "cross")
    sv = vm.strip_view(captioner, vm.Selection(block=bi), blocks)
    assert [p.name for p in sv.panels] == ["a (1)", "man", "on", "a (4)", "horse", "</s>"]
    sv = vm.strip_view(captioner, vm.Selection(block=bi, step=3), blocks)
    assert [p.name for p in sv.panels] == ["a (1)", "man", "on", "a (4)"]
