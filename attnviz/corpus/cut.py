"""``--max-tokens N``: how a corpus item longer than N tokens is cut, one rule for every engine and command
(``corpus``, ``compare --texts``, ``ablate --texts``; the local engine's plan and Ray Data's tokenise step alike).

* One text: its first N tokens, a final special token ([SEP], ``</s>``) kept last.
* A sentence pair (an encoder's ``--text-pair-column``): the pair's tokens as the model reads them
  (``[CLS] A [SEP] B [SEP]``) cut to N, every special token kept and the two sentences' tokens cut *longest first*,
  as Hugging Face tokenizers' ``longest_first`` truncation does (``tokenizer(a, b, truncation=True,
  max_length=N)``).
* An encoder-decoder's source and target (:mod:`attnviz.corpus.pairs`): the source as one text, and the decoder's
  rows (its start token, then the target's tokens) to their first N.

All three are ``attnviz open --max-tokens``'s rules, and live in :mod:`attnviz.runtime.truncation` (the runtime
cuts what ``open``/``extract`` and the window show: a corpus example and ``open`` of the same text or source and
target read the same tokens).

What the model read of an item cut is kept (:class:`Read`): the examples show it, not the file's text.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnviz.runtime.truncation import cut_pair, keep_single

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


def cut(tok, text: str, pair: str | None, special: np.ndarray, n: int) -> tuple[np.ndarray, Read]:
    """One item's tokens (``special``: their flags, as encoded, specials included) past ``n``: which to keep, and
    what the model reads of the text (and pair).  ``pair``: a sentence B in the encoding (None: one text).  A pair
    too short for its special tokens and a token of each sentence is refused (AttnvizError: the caller names the
    item)."""
    if pair is None:
        keep = keep_single(special, n)
        return keep, Read(tok.leading_text(text, int((keep & ~special).sum())))
    c = cut_pair(tok, text, pair, special, n)
    return c.keep, Read(tok.leading_text(text, c.kept[0]), tok.leading_text(pair, c.kept[1]))
