"""Finding a token in a long map (the window's "find" box on Head map and Token links): 2,048 rows are 45,000
pixels of Token links and one label in sixteen on the Head map, so a word cannot be found by eye.

What is typed is a position (``300``, or ``#300``: as ``--query`` and the hover read-out count them) or a token's
text, matched without case and without the tokenizer's word markers (``Ġ``, ``▁``, ``##``): the first row at or
after ``start`` that holds it, wrapping round, so pressing Enter again steps through every occurrence.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_POSITION = re.compile(r"#?\s*(\d+)")


@dataclass(frozen=True)
class Found:
    row: int  # the drawn row (an index into the map's rows)
    count: int  # how many rows hold what was typed (1 for a position)
    nth: int  # which of them this is, from 1


def _bare(label: str) -> str:
    """A token's text to match against: the word markers dropped, whitespace trimmed, no case."""
    s = str(label).replace("Ġ", " ").replace("▁", " ")  # (clean_label's markers; its cut at 18 characters is not)
    return s.strip().removeprefix("##").lower()


def find_token(labels: Sequence[str], positions: Iterable[int], typed: str, start: int = 0) -> Found | None:
    """The row of ``labels`` (whose model positions are ``positions``) that ``typed`` names, the first at or after
    row ``start`` (wrapping); None when none does (or nothing is typed)."""
    typed = typed.strip()
    if not typed:
        return None
    number = _POSITION.fullmatch(typed)
    if number is not None:
        pos = int(number.group(1))
        rows = [i for i, p in enumerate(positions) if int(p) == pos]
        if rows:
            return Found(rows[0], 1, 1)
        if typed.startswith("#"):
            return None
    want = typed.lower().removeprefix("##")
    rows = [i for i, lab in enumerate(labels) if _bare(lab) == want]
    if not rows:
        return None
    at = next((k for k, i in enumerate(rows) if i >= start), 0)
    return Found(rows[at], len(rows), at + 1)
