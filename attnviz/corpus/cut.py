"""``--max-tokens N``: how a corpus item longer than N tokens is cut, one rule for every engine and command
(``corpus``, ``compare --texts``, ``ablate --texts``; the local engine's plan and Ray Data's tokenise step alike).

* One text: its first N tokens, a final special token ([SEP], ``</s>``) kept last: ``attnviz open --max-tokens``'s
  rule (runtime/limits.truncate).
* A sentence pair (an encoder's ``--text-pair-column``): the pair's tokens as the model reads them
  (``[CLS] A [SEP] B [SEP]``) cut to N, every special token kept and the two sentences' tokens cut *longest first*,
  as Hugging Face tokenizers' ``longest_first`` truncation does (``tokenizer(a, b, truncation=True,
  max_length=N)``): the longer sentence loses tokens from its end until the pair fits; where both are longer than
  half of what is left, A keeps the lower half and B the rest (the longer keeps the odd token).  ``open
  --text-pair --max-tokens`` cuts the tail instead (B first); a pair is cut here as it would be for training.
* An encoder-decoder's source and target (:mod:`attnviz.corpus.pairs`): the source as one text, and the decoder's
  rows (its start token, then the target's tokens) to their first N.

What the model read of an item cut is kept (:class:`Read`): the examples show it, not the file's text.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnviz import AttnvizError

# run.json's words for each rule (a reader of the results should not need this file)
SINGLE = "each item's first N tokens, a final special token ([SEP], </s>) kept last"
PAIR = (
    "each pair's tokens as the model reads them ([CLS] A [SEP] B [SEP]) to N: the special tokens kept, the longer "
    "sentence cut first from its end (Hugging Face tokenizers' longest_first truncation)"
)
SOURCE_TARGET = (
    "each source to its first N tokens (a final </s> kept last) and each decoder row sequence (the start token, "
    "then the target's tokens) to its first N"
)
SOURCE_GENERATE = "each source to its first N tokens (a final </s> kept last); the decoder reads what it generates"


@dataclass(frozen=True)
class Read:
    """What the model read of an item cut by ``--max-tokens``: the start of its text (and of its pair)."""

    text: str
    pair: str | None = None


def split_budget(la: int, lb: int, budget: int) -> tuple[int, int]:
    """How many of A's ``la`` and B's ``lb`` tokens a pair keeps within ``budget``: Hugging Face tokenizers'
    ``longest_first`` (the shorter side whole where it fits in half, else A the lower half; tests check it
    against the tokenizers library itself)."""
    if la + lb <= budget:
        return la, lb
    if la > lb:
        kb = min(lb, budget // 2)
        return budget - kb, kb
    ka = min(la, budget // 2)
    return ka, budget - ka


def keep_single(special: np.ndarray, n: int) -> np.ndarray:
    """Which of one text's tokens (``special``: its special flags) the first ``n`` keep, a final special kept last."""
    c = len(special)
    keep = np.ones(c, bool)
    final = int(bool(special[c - 1]) and n > 1)
    keep[n - final : c - final] = False
    return keep


def cut(tok, text: str, pair: str | None, special: np.ndarray, n: int) -> tuple[np.ndarray, Read]:
    """One item's tokens (``special``: their flags, as encoded, specials included) past ``n``: which to keep, and
    what the model reads of the text (and pair).  ``pair``: a sentence B in the encoding (None: one text).  A pair
    too short for its special tokens and a token of each sentence is refused (AttnvizError: the caller names the
    item)."""
    if pair is None:
        keep = keep_single(special, n)
        return keep, Read(tok.leading_text(text, int((keep & ~special).sum())))
    words = np.flatnonzero(~special)  # A's tokens, then B's: a tokenizer's pair template only adds special tokens
    la = len(tok.encode_ids(text, None, add_special=False).ids)
    lb = len(tok.encode_ids(pair, None, add_special=False).ids)
    if la + lb != len(words):
        raise AttnvizError(
            f"its pair reads as {len(words)} tokens and its sentences as {la} + {lb} (a special token typed in the "
            "text?), so --max-tokens cannot tell them apart; remove it from the text, or leave out --max-tokens"
        )
    fixed = len(special) - len(words)
    if n < fixed + 2:
        raise AttnvizError(
            f"--max-tokens {n} leaves no token of one sentence of this pair (its {fixed} special tokens stay); "
            f"give --max-tokens {fixed + 2} or more"
        )
    ka, kb = split_budget(la, lb, n - fixed)
    keep = np.ones(len(special), bool)
    keep[words[ka:la]] = False
    keep[words[la + kb :]] = False
    return keep, Read(tok.leading_text(text, ka), tok.leading_text(pair, kb))
