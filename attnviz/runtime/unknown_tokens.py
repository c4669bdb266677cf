"""A text whose words the tokenizer does not know: most of its tokens are the unknown token (``[UNK]``, ``<unk>``).

Every map then relates ``[UNK]`` to ``[UNK]``: the usual first-hour slip is typing English into a model trained on
another language or script (the translation demo reads Greek).  It is said as a note, not refused (a few unknown
words are normal, and a researcher may mean it): ``attnviz extract`` prints it, the window's Run section lists it
with the run's other notes.  Only a tokenizer that names its unknown token (WordPiece, WordLevel, BPE, a vocabulary
from metadata) is checked; a Unigram model's ``unk_id`` is not exposed by ``tokenizers`` and byte-level BPE has no
unknown token at all."""

from __future__ import annotations

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


def unknown_notes(notes: object) -> list[str]:
    """The notes of a run (``info["notes"]``) that say a text was mostly unknown tokens."""
    return [n for n in notes if isinstance(n, str) and MARK in n] if isinstance(notes, list) else []
