"""Token labels as a person reads them, on screen and in print: cleaned text and which ticks to show.

Pure string and index rules with no view-model imports: the heatmap, the alignment, the links, the strip and the
figures' layout all label tokens through them, so a token reads the same everywhere (an audio encoder's frames at round
times: :func:`time_tick_indices`).
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections.abc import Callable

import numpy as np

MAX_LABEL_CHARS = 18  # in columns: a wide character (Chinese, Japanese, Korean; East Asian Wide or Fullwidth) takes two


def _columns(c: str) -> int:
    return 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1


def _cut(s: str, limit: int) -> str:
    """``s`` cut to ``limit`` columns, an ellipsis ending it where it was cut: 18 Chinese characters are as wide as
    36 Latin letters, and a figure's margin is sized to its widest label (a 13-character Chinese token shrank a
    3.5-in figure's map by a third)."""
    if sum(map(_columns, s)) <= limit:
        return s
    used, out = 0, []
    for c in s:
        used += _columns(c)
        if used > limit - 1:
            break
        out.append(c)
    return "".join(out) + "…"


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
    return _cut(s, MAX_LABEL_CHARS)


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


POSITION_MARK = " ·"  # between a thinned label's token and its position: "the ·1023"


def tick_texts(labels: list[str], positions: np.ndarray | list[int] | None, shown: list[int], among: int) -> list[str]:
    """The texts of the ticks ``shown`` (indices into ``labels``) on an axis that holds ``among`` positions.

    Where every position is labelled, each tick is its token.  Where the labels are thinned, each also says its
    position (``positions[i]``: the map's own, as ``--query`` / ``--span`` count them, hidden special tokens not
    moving them): "the" at 1,023 or at 2,311 reads alike, and a window to ask for needs the numbers.  The position
    follows the token, so it sits next to the axis: right-aligned on the y axis the numbers line up in one column,
    rotated on the x axis they stand at the ticks.  ``positions`` None: the plain tokens (an axis without them)."""
    if positions is None or len(shown) >= among:
        return [labels[i] for i in shown]
    return [f"{labels[i]}{POSITION_MARK}{int(positions[i])}" for i in shown]


# an audio axis's tick strides in seconds: a reader counts time in round steps (0.5 s, 1 s, 5 s), never the 0.78 s or
# 0.84 s that an even stride of 20 ms frames makes
TIME_STEPS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0)
# a frame's time, then (a CTC head's frames, runtime/ctc.py) the letter it chose: "0.12 s A"
_FRAME_TIME = re.compile(r"^(\d+\.(\d{2,3})) s(?: |$)")


@functools.lru_cache(maxsize=16)
def _frame_step(labels: tuple[str, ...]) -> float | None:
    if len(labels) < 2 or not (_FRAME_TIME.match(labels[0]) and _FRAME_TIME.match(labels[-1])):
        return None  # (words: known at the first label, never 30,000 matches)
    found = [_FRAME_TIME.match(s) for s in labels]
    if not all(found):
        return None
    times = [float(m.group(1)) for m in found]  # type: ignore[union-attr]
    digits = len(found[-1].group(2))  # type: ignore[union-attr]
    step = times[-1] / (len(labels) - 1)  # the last time: the spacing to its printed digits / (n - 1)
    if step <= 0 or any(abs(t - i * step) > 0.6 * 10.0**-digits for i, t in enumerate(times)):
        return None
    return step


def frame_step(labels: list[str]) -> float | None:
    """Seconds per position where ``labels`` are an audio encoder's frame times (``"0.00 s", "0.02 s", ...``, as
    :func:`attnviz.runtime.audio.frame_labels` writes them: position i at i x the spacing; a CTC head's letter may
    follow, ``"0.12 s A"``), else None (tokens, or frames with some dropped: their positions are not times)."""
    return _frame_step(tuple(labels))


def time_tick_indices(lo: int, hi: int, step: float, fit: int, focus: int | None = None) -> list[int]:
    """Which frames ``lo..hi`` (``step`` seconds apart) to label when ``fit`` labels fit: those at round times, the
    finest stride of :data:`TIME_STEPS` (a whole number of frames) whose ticks fit, and the focused frame (a tick
    nearer to it than a label's extent makes way for it, as :func:`tick_indices`)."""
    fit = max(2, int(fit))
    ticks: list[int] = []
    for stride in TIME_STEPS:
        frames = stride / step
        if frames < 1 - 1e-6 or abs(frames - round(frames)) > 1e-3:  # a round time falls on a frame, never between
            continue
        k0, k1 = math.ceil(lo * step / stride - 1e-6), math.floor(hi * step / stride + 1e-6)
        ticks = sorted({min(hi, max(lo, round(k * stride / step))) for k in range(k0, k1 + 1)})
        if len(ticks) <= fit:
            break
    if focus is not None and lo <= focus <= hi:
        near = (hi - lo + 1) / fit  # about one label's extent in frames
        ticks = sorted({i for i in ticks if abs(i - focus) >= near} | {int(focus)})
    return ticks if ticks else tick_indices(hi - lo + 1, fit, None if focus is None else focus - lo)


TITLE_SEP = " · "  # what a map's title joins its parts with ("decoder cross-attention · layer 1 · head 0 · ...")


def title_lines(title: str, width: Callable[[str], float], room: float) -> list[str]:
    """``title`` on one line where it fits in ``room`` (``width`` measures a text), else on two, broken between two
    of its parts (at :data:`TITLE_SEP`) where the wider line is narrowest: the lines come out about even, and each
    part stays whole where two lines hold it (the caller cuts a line still too wide with "…").  A map's title names
    the block, layer and head first and a speech clip's "the clip: frames 0–115 of 200 (padding cut)" last: cut to
    one line at 1400 px, that note read "(pa…", the part that says the map is not the whole padded window."""
    parts = title.split(TITLE_SEP)
    if len(parts) < 2 or width(title) <= room:
        return [title]
    splits = [(TITLE_SEP.join(parts[:k]), TITLE_SEP.join(parts[k:])) for k in range(1, len(parts))]
    first, rest = min(splits, key=lambda two: max(width(two[0]), width(two[1])))
    return [first, rest]
