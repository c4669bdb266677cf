"""``--max-tokens N``: how a text or a sentence pair longer than N tokens is cut.  One rule for every entry:
``open``/``extract``/the window's max-tokens box (:func:`attnviz.runtime.builders.fit_positions`) and every corpus
command (``attnviz/corpus/cut.py`` imports it from here), so a corpus example and what ``open`` shows of the same
text are the same tokens.

* One text: its first N tokens, a final special token ([SEP], ``</s>``) kept last.
* A sentence pair: the pair's tokens as the model reads them (``[CLS] A [SEP] B [SEP]``, ``<s> A </s></s> B </s>``)
  cut to N, every special token kept and the two sentences' tokens cut *longest first*, as Hugging Face tokenizers'
  ``longest_first`` truncation does (``tokenizer(a, b, truncation=True, max_length=N)``): the longer sentence loses
  tokens from its end until the pair fits; where both are longer than half of what is left, A keeps the lower half
  and B the rest.  (Cutting the tail instead would drop B whole before A lost a token: not what the model was
  trained on, and not what a corpus run of the same pair reads.)
* An encoder–decoder's source and teacher-forced target (``--text SRC --text-pair TGT``, a corpus's
  ``--text-pair-column``): the source as one text, and the decoder's rows (its start token, then the target's
  tokens) to their first N (:func:`decoder_rows`): each side has its own positions, so each gets N.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from attnviz import AttnvizError
from attnviz.core.setting_words import fix, give, setting

RULE = "longest first, special tokens kept, as Hugging Face tokenizers cut a pair"  # the note's words
ROWS_RULE = "the decoder rows are the start token, then the target's tokens; each side to its first N, as a corpus cuts"


def cut_flag(n: int | None) -> str:
    """How every note of a cut names it, "(--max-tokens N)", in the window "(max tokens N)" (:func:`cut_notes` finds
    them by it)."""
    return f"({setting('max_tokens', n)})"


# the note's mark in either front end's words: "(--max-tokens 8)", "(max tokens 8)"
_CUT_FLAG = re.compile(r"\((?:--max-tokens|max tokens) \d+\)")


def cut_notes(notes: object) -> list[str]:
    """The notes of a run (``info["notes"]``) that say what ``--max-tokens`` cut: which sentence lost how many
    tokens."""
    return [n for n in notes if isinstance(n, str) and _CUT_FLAG.search(n)] if isinstance(notes, list) else []


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


@dataclass(frozen=True)
class PairCut:
    """A sentence pair cut to N: which of its tokens stay, and how many of each sentence's."""

    keep: np.ndarray  # over the pair's tokens as encoded, special tokens included
    lengths: tuple[int, int]  # A's and B's tokens before the cut (special tokens not counted)
    kept: tuple[int, int]  # ... and after

    def describe(self) -> str:
        """Which sentence lost how many tokens, for the run's note."""
        (la, lb), (ka, kb) = self.lengths, self.kept
        return f"sentence A lost {la - ka} of its {la} tokens, sentence B {lb - kb} of its {lb} ({RULE})"


def cut_pair(tok, text: str, pair: str, special: np.ndarray, n: int) -> PairCut:
    """A pair's tokens (``special``: their flags, as ``tok`` encodes ``text`` with ``pair``) cut to ``n``, longest
    first.  Refused in one line (AttnvizError; a corpus names the item) where ``n`` leaves no token of a sentence
    beside the special tokens, or where the sentences cannot be told apart in the pair (a special token typed in
    the text reads as one)."""
    words = np.flatnonzero(~special)  # A's tokens, then B's: a tokenizer's pair template only adds special tokens
    la = len(tok.encode_ids(text, None, add_special=False).ids)
    lb = len(tok.encode_ids(pair, None, add_special=False).ids)
    if la + lb != len(words):
        raise AttnvizError(
            f"this pair reads as {len(words)} tokens and its sentences as {la} + {lb} (a special token typed in the "
            f"text?), {fix('pair_apart')}",
            param="max_tokens",
        )
    fixed = len(special) - len(words)
    if n < fixed + 2:
        raise AttnvizError(
            f"{setting('max_tokens', n)} leaves no token of one sentence of this pair (its {fixed} special tokens "
            f"stay); {give('max_tokens', fixed + 2)} or more",
            param="max_tokens",
        )
    ka, kb = split_budget(la, lb, n - fixed)
    keep = np.ones(len(special), bool)
    keep[words[ka:la]] = False
    keep[words[la + kb :]] = False
    return PairCut(keep, (la, lb), (ka, kb))


def decoder_rows(start: list[int], target: list[int], n: int | None) -> list[int]:
    """An encoder–decoder's teacher-forced decoder rows, ``start`` (its start token) then the ``target``'s tokens,
    cut to their first ``n`` (None: all).  No end token is kept last: the target has none (the model would predict
    it), so the rows kept are the start and the target's first ``n - 1`` tokens."""
    rows = [*start, *target]
    return rows if n is None else rows[:n]


@dataclass(frozen=True)
class SourceTargetCut:
    """An encoder–decoder's source and decoder rows cut to N: how many of each before and after."""

    source: tuple[int, int]  # the source's tokens (special tokens included) before and after the cut
    rows: tuple[int, int]  # the decoder's rows (the start token, then the target's tokens) before and after

    @property
    def cut(self) -> bool:
        return self.source[1] < self.source[0] or self.rows[1] < self.rows[0]

    def describe(self) -> str:
        """Which side lost how many tokens, for the run's note."""
        (ns, ks), (nr, kr) = self.source, self.rows
        return (
            f"the source lost {ns - ks} of its {ns} tokens, the target's decoder rows {nr - kr} of their {nr} "
            f"({ROWS_RULE})"
        )


def _pick(enc, keep: np.ndarray):
    """``enc`` (an :class:`~attnviz.runtime.inputs.Encoded`) with only the tokens ``keep`` marks; a list left
    empty (labels not built) stays empty."""

    def pick(xs):
        return [x for x, k in zip(xs, keep) if k] if xs is not None and len(xs) == len(keep) else xs

    return type(enc)(ids=pick(enc.ids), tokens=pick(enc.tokens), special=pick(enc.special), type_ids=pick(enc.type_ids))


def truncate(enc, n: int):
    """The first ``n`` tokens of one text's encoding, keeping a final special token (``[SEP]``, ``</s>``) last."""
    if n < 1:
        raise AttnvizError(f"--max-tokens {n}: give at least 1")
    if len(enc.ids) <= n:
        return enc
    return _pick(enc, keep_single(np.asarray(enc.special, bool), n))


def truncate_pair(tok, enc, text: str, pair: str, n: int):
    """A pair's encoding (``tok.encode(text, pair)``) cut to ``n`` tokens longest first, and the :class:`PairCut`
    that says how (None where it fits)."""
    if n < 1:
        raise AttnvizError(f"--max-tokens {n}: give at least 1")
    if len(enc.ids) <= n:
        return enc, None
    c = cut_pair(tok, text, pair, np.asarray(enc.special, bool), n)
    return _pick(enc, c.keep), c
