"""Generation steps: which decoder row chose which word, and how many rows a step shows.

One rule for every view (heatmap, alignment, strip, image regions): the query at decoder position ``p`` predicts
the token at ``p + 1``.  A teacher-forced target's rows follow the same convention (:func:`target_rows`).

Which word names a decoder row differs by view, each for a reason:

- **Heatmap, Token links** (a decoder's self-attention, GPT-2's, a VLM's): a row is named by the token it *reads*
  (its input), as its column is; the square map's diagonal is then a token attending to itself and the rows and
  columns read as one sentence.  Hovering a row says both (:func:`~attnviz.core.view.alignment.row_story`: “the”
  → “cat”).
- **Alignment, the strip, Image regions' words** (a captioner's, a VLM's): a row is named by the word it
  *produced* (its output, :func:`row_outputs`): each asks "where did the model look to choose this word?", and a
  generation step is the row that chose its word, so the step's highlighted row reads the word generated at that
  step.  Alignment's Shift-Att choice (``rows="input"``) names each word by the row that reads it instead.
"""

from __future__ import annotations

import numpy as np

from attnviz.core.attention import AttentionResult, Block
from attnviz.core.rows import beam_rows
from attnviz.core.view.selection import _pad, blk_len, real_rows


def n_steps(result: AttentionResult | None, batch: int = 0) -> int:
    """Generated words of batch row ``batch``: a beam search's rows are hypotheses of their own lengths (row 0 the
    best, ``result.generated``); any other result's rows share one generation."""
    if result is None:
        return 0
    return len(generated_words(result, batch))


def generated_words(result: AttentionResult, batch: int = 0) -> list[str]:
    """Batch row ``batch``'s generated words: a beam search's row its own hypothesis' (``result.generated`` is the
    best one's), else the result's."""
    beams = beam_rows(result)
    if beams is not None and 0 <= batch < len(beams):
        return [str(w) for w in beams[batch].get("generated") or []]
    return list(result.generated or [])


def producing_row(result: AttentionResult, tq: int, k: int, batch: int = 0) -> int:
    """Decoder query row whose output chose generated token ``k`` (0-based).

    The query at decoder position ``p`` predicts the token at ``p + 1``, so token ``k`` was chosen
    by row ``prompt_len - 1 + k``.  Without a known prompt length the axis ends with the generated
    tokens except the last (the runtime does not feed the final token back), so row ``tq - g + k``.
    """
    if result.prompt_len and result.prompt_len > 0:
        return int(result.prompt_len) - 1 + k
    return tq - n_steps(result, batch) + k


NEXT_WORD = "(next)"  # a row whose output nobody saw: the run's last row when it generated nothing


def row_outputs(result: AttentionResult, blk: Block, rows: list[int]) -> list[tuple[int, str]]:
    """``(query row, the word that row produced)`` for decoder query ``rows`` (the row's *output*, one rule for
    Image regions' words on screen and in a figure, a VLM's as a captioner's): the word generated at its producing
    row (:func:`producing_row`), else the token fed at the next position (a prompt's or a typed caption's: forced
    there, so what the row was made to produce), else :data:`NEXT_WORD` (the last row of a run that generated
    nothing: its word was never chosen).  Rows out of the block are left out."""
    tq = blk_len(blk, 0)
    chosen: dict[int, str] = {}
    for k, w in enumerate(generated_words(result, blk.batch)):
        r = producing_row(result, tq, k, blk.batch)
        if 0 <= r < tq:
            chosen.setdefault(r, str(w))
    labels = blk.query_axis.labels
    out = []
    for r in rows:
        if 0 <= r < tq:
            out.append((r, chosen.get(r, str(labels[r + 1]) if r + 1 < min(tq, len(labels)) else NEXT_WORD)))
    return out


def generation_rows(result: AttentionResult, blk: Block) -> list[tuple[int, str]]:
    """``(query row, word)`` for each generated word of a decoder block (one rule for every view).

    Without generated words (teacher forcing) every query row with its own token, a padded row's pads left out.
    """
    tq = blk_len(blk, 0)
    if blk.stack == "decoder" and n_steps(result, blk.batch):
        words = generated_words(result, blk.batch)
        rows = [(r, str(w)) for k, w in enumerate(words) if 0 <= (r := producing_row(result, tq, k, blk.batch)) < tq]
        # a shorter beam's rows past its own end are padding (its last word, never fed back, has no row: as greedy)
        rows = real_rows(blk, rows)
        if rows:
            return rows
    return real_rows(blk, [(i, str(blk.query_axis.labels[i])) for i in range(tq)])


def target_rows(blk: Block, convention: str, n_rows: int) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Query rows, words and special flags of a teacher-forced target ([start] + target tokens read by the
    decoder): the row that predicts each target token ("predict": row t - 1 for token t) or the row that reads
    it ("input", Shift-Att: row t).  The start token is no target word, so it has no row either way (the rule
    of ``attnviz align``: ``core.align.row_words``)."""
    ax = blk.query_axis
    n = min(n_rows, len(ax.labels))
    special = list(ax.special or [False] * n)
    shift = 1 if convention == "predict" else 0  # the word on row r sits at position r + shift
    pad = _pad(ax, np.arange(len(ax)), len(ax)) if len(ax) else np.zeros(0, bool)
    # a padded row's pads are neither a word nor a row that reads or predicts one
    rows = [r for r in range(n) if 0 < r + shift < n and not (pad.size and (pad[r] or pad[r + shift]))]
    return (
        np.array(rows, int),
        [str(ax.labels[r + shift]) for r in rows],
        np.array([bool(special[r + shift]) if r + shift < len(special) else False for r in rows], bool),
    )


def word_special(result: AttentionResult, blk: Block, row: int, word: str) -> bool:
    """Is the word chosen at query ``row`` a special token (EOS...)?  It sits at decoder position row + 1."""
    ax = blk.query_axis
    special = list(ax.special or [])
    if not n_steps(result, blk.batch):
        return bool(special[row]) if row < len(special) else False
    if row + 1 < len(special) and ax.labels[row + 1] == word:
        return bool(special[row + 1])
    s = str(word)
    return (s.startswith("<") and s.endswith(">")) or (s.startswith("[") and s.endswith("]"))


def step_rows(result: AttentionResult, block: Block, step: int) -> int | None:
    """How many decoder positions are visible at generation step ``step`` (None = all).

    Step ``s`` shows the positions that existed when the ``s``-th generated token was chosen.
    """
    g = n_steps(result, block.batch)
    if step < 0 or g == 0 or block.stack != "decoder" or step >= g:
        return None
    tq = blk_len(block, 0)
    return max(1, min(tq, producing_row(result, tq, step, block.batch) + 1))
