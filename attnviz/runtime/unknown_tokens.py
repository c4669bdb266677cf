"""A text whose words the tokenizer does not know: most of its tokens are the unknown token (``[UNK]``, ``<unk>``).

Every map then relates ``[UNK]`` to ``[UNK]``: the usual first-hour slip is typing English into a model trained on
another language or script (the translation demo reads Greek).  It is said as a note, not refused (a few unknown
words are normal, and a researcher may mean it): ``attnviz extract`` prints it, the window's Run section lists it
with the run's other notes.  Only a tokenizer that names its unknown token (WordPiece, WordLevel, BPE, a vocabulary
from metadata) is checked; a Unigram model's ``unk_id`` is not exposed by ``tokenizers`` and byte-level BPE has no
unknown token at all.

``attnviz corpus`` counts the items mostly of it (:func:`items_mostly_unknown` over the plan's flat token arrays,
:func:`mostly_unknown` an item at a time where the tokens come as lists), writes the count to run.json and says
:func:`corpus_note` once at the end: a corpus in the wrong language otherwise yields statistics of [UNK] maps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

SHARE = 0.5  # at least this share of a text's own tokens (special tokens not counted) unknown: said
MARK = "are the unknown token"


def unknown_note(tok, enc, what: str = "the text") -> str | None:
    """The note for ``enc`` (an :class:`~attnviz.runtime.inputs.Encoded` by ``tok``), or None when most of its
    tokens are known (or the tokenizer names no unknown token)."""
    unk = getattr(tok, "unk_id", None)
    if unk is None:
        return None
    # the text's own tokens: not the ones the tokenizer adds ([CLS], [SEP]); a vocabulary from metadata flags its
    # unknown token as special too, and it stands for a word of the text
    own = [i for i, sp in zip(enc.ids, enc.special) if not sp or i == unk]
    k = sum(1 for i in own if i == unk)
    if not own or k == 0 or k < SHARE * len(own):
        return None
    return (
        f"{k} of {len(own)} tokens of {what} {MARK} {tok.label(unk)!r} (words the tokenizer does not know): is the "
        "text in the model's language and script?"
    )


def mostly_unknown(unk: int, ids: Sequence[int], special: Sequence[bool]) -> bool:
    """Whether one encoded text (its ids and special-token flags) is mostly ``unk``, as :func:`unknown_note`
    counts (cheap for the usual text without one: a single membership test)."""
    if unk not in ids:
        return False
    own = [i for i, sp in zip(ids, special) if not sp or i == unk]
    return sum(1 for i in own if i == unk) >= SHARE * len(own)


def items_mostly_unknown(unk: int, ids: np.ndarray, special: np.ndarray, counts: np.ndarray) -> int:
    """How many of the items in flat arrays (item ``i``: the next ``counts[i]`` of ``ids`` / ``special``) are
    mostly ``unk``, as :func:`mostly_unknown` says of each: a few vectorised passes over the tokens."""
    import numpy as np  # (here: the window and `extract` import this module for its notes alone)

    is_unk = ids == unk
    if not is_unk.any():  # the usual corpus: one pass
        return 0
    ends = np.cumsum(counts)
    at = np.concatenate(([0], ends))

    def per_item(flags: np.ndarray) -> np.ndarray:
        c = np.concatenate(([0], np.cumsum(flags, dtype=np.int64)))
        return c[at[1:]] - c[at[:-1]]

    k, own = per_item(is_unk), per_item(~special | is_unk)
    return int(np.count_nonzero((k > 0) & (k >= SHARE * own)))


def corpus_note(mostly: int, items: int, token: str) -> str | None:
    """The corpus's note when ``mostly`` of its ``items`` are mostly the unknown token ``token`` (None if none)."""
    if mostly <= 0:
        return None
    are = "is" if mostly == 1 else "are"
    return (
        f"{mostly:,} of {items:,} items {are} mostly the unknown token {token!r} (words the tokenizer does not "
        "know): is the corpus in the model's language and script?"
    )


def unknown_notes(notes: object) -> list[str]:
    """The notes of a run (``info["notes"]``) that say a text was mostly unknown tokens."""
    return [n for n in notes if isinstance(n, str) and MARK in n] if isinstance(notes, list) else []
