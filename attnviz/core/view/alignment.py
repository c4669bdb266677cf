"""The alignment view: generated (or target) words x source tokens from cross-attention.

A row is the decoder query that chose a word (or, Shift-Att, the row that reads it), labelled by that word
(:mod:`.steps` says which row that is).
"""

from __future__ import annotations

import numpy as np

from attnviz.core import reduce
from attnviz.core.attention import AttentionResult, Block
from attnviz.core.view.clip import clip_cut
from attnviz.core.view.colourbar import HIDDEN_NOTE
from attnviz.core.view.labels import clean_label
from attnviz.core.view.maps import MapView
from attnviz.core.view.overview import scale_top
from attnviz.core.view.selection import (
    Selection,
    ViewError,
    _pad,
    _special,
    blk_len,
    clamp,
    head_matrix,
    hide_mask,
    real_rows,
    result_blocks,
)
from attnviz.core.view.steps import generation_rows, n_steps, target_rows, word_special
from attnviz.core.words import count


def cross_block(blocks: list[Block], sel: Selection) -> int | None:
    """The block Alignment shows: the selected block when it is cross-attention, else the first one."""
    if blocks and 0 <= sel.block < len(blocks) and blocks[sel.block].kind == "cross":
        return sel.block
    return next((i for i, b in enumerate(blocks) if b.kind == "cross"), None)


def alignment_map(result: AttentionResult, sel: Selection, blocks: list[Block] | None = None) -> MapView:
    """Generated (or target) words x source tokens from cross-attention.

    Row ``k`` is the decoder query that *chose* word ``k`` (the position of the previous token), so
    rows are labelled by the word they chose; the step keeps the words up to it.
    """
    blocks = result_blocks(result, sel, blocks)
    b = cross_block(blocks, sel)
    if b is None:
        raise ViewError(
            "the alignment view needs cross-attention (an encoder-decoder model); this model has only self-attention",
            param="view",
        )
    blk = blocks[b]
    s = clamp(
        sel.with_(block=b, step=-1, hide_special=False, keep=1.0, mode="mean" if sel.mode == "rollout" else sel.mode),
        blocks,
    )
    m, what = head_matrix(blk, s)
    m = np.asarray(m, np.float32)
    notes: list[str] = []
    g = n_steps(result, blk.batch)
    if g:
        rows = generation_rows(result, blk)
        if sel.rows == "input":  # Shift-Att: word k is read by the row after the one that chose it
            # (a shorter beam's row after its last fed word is padding, not a row reading it)
            rows = real_rows(blk, [(r + 1, w) for r, w in rows if r + 1 < m.shape[0]])
        if sel.step >= 0:
            rows = rows[: sel.step + 1]
            notes.append(f"step {min(sel.step + 1, g)}/{g}")
        if not rows:  # Shift-Att reads word k at the row after the one that chose it: one word has no such row
            raise ViewError(
                "reading rows (Shift-Att) read each word at the row after the one that chose it: with "
                f"{count(g, 'generated word')} there is none; generate 2 or more words",
                param="generate",
            )
        q_pos = np.array([r for r, _ in rows], int)
        words = [w for _, w in rows]
        q_sp = np.array([word_special(result, blk, r, w) for r, w in rows], bool)
    else:
        q_pos, words, q_sp = target_rows(blk, sel.rows, m.shape[0])
        if not len(q_pos):
            raise ViewError(
                "the alignment view needs target words: give the target (text pair) to teacher-force, or generate",
                param="generate",
            )
    k_pos = np.arange(m.shape[1])
    cut = clip_cut(result, blk, sel)
    if cut is not None:  # a speech clip's frames: the padding after it is not the user's sound
        k_pos = k_pos[: cut.keys]
        notes.append(cut.note)
    k_pos = k_pos[~_pad(blk.key_axis, k_pos, blk_len(blk, 1))]  # a padded row's source: its own tokens
    k_sp = _special(blk.key_axis, k_pos, blk_len(blk, 1))
    m = m[np.ix_(q_pos, k_pos)]
    if sel.hide_special and (q_sp.any() or k_sp.any()):
        dq, dk = hide_mask(q_sp), hide_mask(k_sp)
        m = reduce.drop_positions(m, dq, dk, renormalize=True)
        q_pos, k_pos, q_sp, k_sp = q_pos[~dq], k_pos[~dk], q_sp[~dq], k_sp[~dk]
        words = [w for w, d in zip(words, dq) if not d]
        notes.append(HIDDEN_NOTE)
    if sel.keep < 1.0:
        m = reduce.keep_mass(m, max(sel.keep, 1e-3))
        notes.append(f"top {round(sel.keep * 100)}% mass")
    target = "generated" if g else "target"
    title = " · ".join(["alignment (cross-attention)", what, *notes])
    return MapView(
        m,
        [clean_label(w) for w in words],
        [clean_label(blk.key_axis.labels[i]) for i in k_pos],
        q_pos,
        k_pos,
        title,
        blk,
        q_sp.tolist(),
        k_sp.tolist(),
        "source",
        target,
        notes,
        scale_top(result, sel.with_(block=b), b, m, blocks),
        sel.scale,
        by_hand=bool(sel.vmax),
    )


def row_story(result: AttentionResult, blk: Block, row: int) -> str:
    """``“[BOS]” → “Blessed”``: a decoder row is the token it reads *and* the word it chose."""
    own = clean_label(blk.query_axis.labels[row]) if row < len(blk.query_axis) else str(row)
    chosen = dict(generation_rows(result, blk)) if blk.stack == "decoder" and n_steps(result, blk.batch) else {}
    return f"“{own}” → “{clean_label(chosen[row])}”" if row in chosen else f"“{own}”"
