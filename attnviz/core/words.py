"""Small pieces of English for messages built from names the program only knows at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (numpy only for the annotation: this module is imported where numpy need not be)
    import numpy as np

# Messages put model kinds ("encoder", "vision-decoder"), dtypes ("object", "int64") and file kinds before "a";
# none of them starts with a silent consonant or a "you" sound, so the first letter decides.
_VOWELS = frozenset("aeiouAEIOU")


def with_article(word: str) -> str:
    """``word`` after its indefinite article: "an encoder", "a decoder", "an image"."""
    return f"{'an' if word[:1] in _VOWELS else 'a'} {word}"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: "1 layer", "2 layers", "0 heads" (nouns that take an -s; give
    ``plural`` for the others: "1 batch", "2 batches")."""
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"


# numpy's kind letters in words: a refusal says "text", not "<U1" (numpy's own code for one-character text)
_KIND_WORDS = {
    "U": "text",
    "S": "bytes",
    "O": "Python objects",
    "c": "complex numbers",
    "M": "dates",
    "m": "time spans",
    "V": "raw bytes",
    "b": "true/false values",
}
_SIZED_KIND_WORDS = {"i": "integers", "u": "unsigned integers", "f": "floats"}


def dtype_words(dtype: np.dtype) -> str:
    """What an array of ``dtype`` (a numpy dtype) holds, in plain words: "text", "64-bit integers", "32-bit
    floats", "records of named fields"; never numpy's codes ("<U1", "|S2", "[('a', '<i4')]")."""
    if dtype.names is not None:
        return "records of named fields"
    if dtype.kind in _SIZED_KIND_WORDS:
        return f"{dtype.itemsize * 8}-bit {_SIZED_KIND_WORDS[dtype.kind]}"
    return _KIND_WORDS.get(dtype.kind, "other data")
