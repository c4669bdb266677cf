"""A CTC head's greedy transcript (``Wav2Vec2ForCTC`` and kin), with numpy only: the frames' letters as row labels.

A CTC model emits one distribution over its letters per encoder frame (``logits [batch, frames, vocab]``).  The
greedy reading (what transformers' ``Wav2Vec2CTCTokenizer.batch_decode`` does with the argmax ids) collapses runs of
the same letter, drops the blank (the pad token) and writes the word delimiter (``|``) as a space.  Each frame that
starts a new letter is labelled with it (``0.42 s T``), so a map's rows and columns say what the head heard where,
and the transcript is the run's note.  The vocabulary is the folder's ``vocab.json`` when ``tokenizer_config.json``
names the CTC tokenizer (a multilingual ``{lang: {token: id}}`` vocabulary through its ``target_lang``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnviz.core.attention import TokenAxis
from attnviz.runtime.audio_notes import CTC_TRANSCRIPT
from attnviz.runtime.sidecar import sidecar_json

CTC_TOKENIZER = "Wav2Vec2CTCTokenizer"
SHOWN_CHARS = 300  # the transcript in the run's note: a long clip's is cut there (the labels hold every letter)


@dataclass(frozen=True)
class CtcVocab:
    """What greedy CTC decoding needs of the tokenizer."""

    tokens: tuple[str, ...]  # by id ("" for an id the vocabulary does not name)
    blank: str = "<pad>"
    delimiter: str = "|"
    space: str = " "
    lower: bool = False

    @classmethod
    def for_model(cls, model_file: Path) -> CtcVocab | None:
        """The CTC vocabulary beside a model file, or None (no CTC tokenizer, or a vocabulary not read)."""
        tc = sidecar_json(model_file, "tokenizer_config.json")
        if tc.get("tokenizer_class") != CTC_TOKENIZER:
            return None
        vocab = sidecar_json(model_file, "vocab.json")
        lang = tc.get("target_lang")
        if isinstance(lang, str) and isinstance(vocab.get(lang), dict):  # MMS-style: one vocabulary per language
            vocab = vocab[lang]
        ids = {t: i for t, i in vocab.items() if isinstance(t, str) and isinstance(i, int) and 0 <= i < 1 << 20}
        if not ids:
            return None
        tokens = [""] * (max(ids.values()) + 1)
        for t, i in ids.items():
            tokens[i] = t

        def text(key: str, default: str) -> str:
            v = tc.get(key, default)
            return v if isinstance(v, str) else default

        return cls(
            tuple(tokens),
            text("pad_token", "<pad>"),
            text("word_delimiter_token", "|"),
            text("replace_word_delimiter_char", " "),
            tc.get("do_lower_case") is True,
        )

    def letters(self, ids: np.ndarray) -> list[str]:
        """Per frame: the letter it starts (its argmax where that differs from the frame before and is no blank),
        else ""."""
        out = []
        prev = None
        for i in ids.tolist():
            tok = self.tokens[i] if 0 <= i < len(self.tokens) else ""
            out.append(tok if tok != prev and tok != self.blank else "")
            prev = tok
        return out

    def transcript(self, letters: list[str]) -> str:
        text = "".join(self.space if t == self.delimiter else t for t in letters if t).strip()
        return text.lower() if self.lower else text


def label_frames(model_file: Path, logits, rows: list[TokenAxis | None]) -> tuple[list[TokenAxis | None], list[str]]:
    """Each row's frames labelled with the letters its CTC head emits there, and the transcripts as notes; the rows
    as they are when the model has no CTC head (no ``[batch, frames, vocab]`` logits over a CTC vocabulary)."""
    vocab = CtcVocab.for_model(model_file)
    arr = np.asarray(logits) if logits is not None else None
    if vocab is None or arr is None or arr.ndim != 3 or arr.shape[0] != len(rows) or arr.shape[2] > len(vocab.tokens):
        return rows, []
    out: list[TokenAxis | None] = []
    notes = []
    for b, axis in enumerate(rows):
        if axis is None or len(axis.labels) != arr.shape[1]:
            return rows, []
        letters = vocab.letters(np.argmax(arr[b], axis=-1))
        labels = [f"{t} {c}" if c else t for t, c in zip(axis.labels, letters)]
        out.append(TokenAxis(labels, axis.special, axis.values, axis.pad))
        said = vocab.transcript([c for c, pad in zip(letters, axis.pad or [False] * len(letters)) if not pad])
        cut = said if len(said) <= SHOWN_CHARS else said[:SHOWN_CHARS] + "…"
        notes.append(f"{CTC_TRANSCRIPT}{f' of row {b}' if len(rows) > 1 else ''}: {cut or '(nothing)'}")
    return out, notes
