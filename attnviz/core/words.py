"""Small pieces of English for messages built from names the program only knows at run time."""

from __future__ import annotations

# Messages put model kinds ("encoder", "vision-decoder"), dtypes ("object", "int64") and file kinds before "a";
# none of them starts with a silent consonant or a "you" sound, so the first letter decides.
_VOWELS = frozenset("aeiouAEIOU")


def with_article(word: str) -> str:
    """``word`` after its indefinite article: "an encoder", "a decoder", "an image"."""
    return f"{'an' if word[:1] in _VOWELS else 'a'} {word}"


def count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: "1 layer", "2 layers", "0 heads" (nouns that take an -s)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
