"""Token labels as a person reads them, on screen and in print: cleaned text and which ticks to show.

Pure string and index rules with no view-model imports: the heatmap, the alignment, the links, the strip and the
figures' layout all label tokens through them, so a token reads the same everywhere.
"""

from __future__ import annotations

import functools
import math

import numpy as np

MAX_LABEL_CHARS = 18


def clean_label(tok: str) -> str:
    """Token text as a person reads it, on screen and in print.

    Drops the byte-level / SentencePiece word markers (``Ġ``, ``▁``), shows whitespace and newline
    tokens visibly and shortens very long tokens.
    """
    s = str(tok).replace("Ċ", "\n").replace("ĉ", "\t")
    if s[:1] in ("Ġ", "▁"):
        s = s[1:]
    s = s.replace("Ġ", " ").replace("▁", " ")
    s = s.replace("\n", "↵").replace("\t", "⇥").replace("\r", "")
    if not s.strip():
        s = "␣"
    if len(s) > MAX_LABEL_CHARS:
        s = s[: MAX_LABEL_CHARS - 1] + "…"
    return s


@functools.lru_cache(maxsize=16)
def _clean_labels(labels: tuple[str, ...]) -> tuple[str, ...]:
    """Every label of an axis cleaned once (a head switch at 2,048 tokens would clean 4,096 again)."""
    return tuple(clean_label(t) for t in labels)


def clean_labels(labels: list[str], positions: np.ndarray) -> list[str]:
    """:func:`clean_label` of ``labels`` at ``positions``."""
    cleaned = _clean_labels(tuple(labels))
    return [cleaned[i] for i in np.asarray(positions).tolist()]


def tick_indices(n: int, fit: int, focus: int | None = None) -> list[int]:
    """Which of ``n`` token labels to show when only ``fit`` fit along the axis.

    The rule a reader can predict: all when they fit; else the first and the last, every
    ``stride``-th in between (an even stride), and the focused (hovered/selected) token -- labels
    less than a stride from the last or the focused one make way for it (they would overlap).
    """
    if n <= 0:
        return []
    fit = max(2, int(fit))
    if n <= fit:
        return list(range(n))
    stride = math.ceil((n - 1) / (fit - 1))
    keep = set(range(0, n, stride))
    must = {0, n - 1} | ({int(focus)} if focus is not None and 0 <= focus < n else set())
    near = stride  # a stride is about one label's extent: a label nearer than that to a kept one would overlap it
    keep = {i for i in keep if i in must or all(abs(i - m) >= near for m in must)}
    return sorted(keep | must)
