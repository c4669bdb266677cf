"""A value the user typed, quoted in a one-line refusal and cut to a width: a 5,000-digit ``--span`` or a
``--heads`` of 10,000 stars was echoed whole, one 'line' of several terminal screens."""

from __future__ import annotations


def quoted(text: str, width: int = 60) -> str:
    """``repr(text)``, or its first ``width`` characters' repr followed by ``… (N characters)``."""
    if len(text) <= width:
        return repr(text)
    return f"{text[:width]!r}… ({len(text):,} characters)"
