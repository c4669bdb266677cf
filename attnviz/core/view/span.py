"""A window of positions cut out of a map (``attnviz figure --span LO-HI``): a 2,048-token head map printed whole
is a page of cells each thinner than a line, its labels one in sixteen; a paper shows the stretch it discusses.

Positions are the map's own (``MapView.q_pos`` / ``k_pos``: what ``--query`` and the window's hover read-out
count), so a window means the same tokens whether special tokens are hidden or not.  A self-attention map's keys
take the rows' window unless a key window is given; a cross-attention map's keys (another sequence) stay whole.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import Block
from attnviz.core.view.clip import clip_cut
from attnviz.core.view.maps import MapView
from attnviz.core.view.selection import Selection, blk_len


def _kept(pos: np.ndarray, span: tuple[int, int], what: str, flag: str, window: int | None = None) -> np.ndarray:
    """Which of ``pos`` lie in ``span``; refused where none does.  ``window``: the positions of the model's whole
    window where the map was cut to a speech clip's frames (:func:`_clip_window`): a span past the clip lies in
    the padding, and ``--padding`` (the whole window) is the fix to name."""
    lo, hi = span
    keep = (np.asarray(pos) >= lo) & (np.asarray(pos) <= hi)
    if not keep.any():
        shown = f"{int(np.min(pos))}-{int(np.max(pos))}" if len(pos) else "none"
        if window is not None and len(pos) and int(np.max(pos)) < lo < window:
            raise AttnvizError(
                f"{flag} {lo}-{hi} lies in the padding after the clip (the map ends with the clip's frames, "
                f"{what} positions {shown}, of the model's {window}); add --padding to draw the whole window, "
                "or give a range within the clip",
                param="span",
            )
        whole = f"; 0-{window - 1} with --padding" if window is not None else ""
        raise AttnvizError(
            f"{flag} {lo}-{hi} holds none of the map's {what} positions ({shown}{whole}); give a range within them",
            param="span",
        )
    return keep


def _clip_window(blk: Block | None, notes: tuple[str, ...] | list[str], axis: int) -> int | None:
    """The length of the model's whole window on ``axis`` (0: queries, 1: keys) where a map of ``blk`` with
    ``notes`` had that axis cut to a speech clip's frames (core.view.clip: the maps end with the clip unless
    ``--padding``), else None."""
    cut = clip_cut(blk.result, blk, Selection()) if blk is not None else None
    if blk is None or cut is None or cut.note not in notes or (cut.rows, cut.keys)[axis] is None:
        return None
    return blk_len(blk, axis)


def _within(span: tuple[int, int], pos: np.ndarray) -> tuple[int, int]:
    """The window as the title says it: its end cut to the map's last position (``--span 2-99999`` of a 4-token map
    was titled 'positions 2–99999', a claim about positions the figure does not have)."""
    return span[0], min(int(span[1]), int(np.max(pos)))


class Window(NamedTuple):
    """Which rows and columns a window keeps (``q``, ``k``: masks over the map's) and what the title says of it."""

    q: np.ndarray
    k: np.ndarray
    said: list[str]


def window(
    blk: Block | None,
    notes: tuple[str, ...] | list[str],
    pos: tuple[np.ndarray, np.ndarray],
    titles: tuple[str, str],
    rows: tuple[int, int] | None,
    keys: tuple[int, int] | None,
) -> Window:
    """The rows and columns of query positions ``rows`` and key positions ``keys`` (a self-attention map's keys
    take ``rows`` unless given); ``titles``: the (query, key) axes' names, for the title."""
    q_pos, k_pos = pos
    self_map = blk is not None and blk.kind == "self"
    if keys is None and self_map:
        keys = rows
    q = _kept(q_pos, rows, "query", "--span", _clip_window(blk, notes, 0)) if rows is not None else None
    if q is None:
        q = np.ones(len(q_pos), bool)
    k_flag = "--key-span" if keys != rows or not self_map else "--span"
    k = _kept(k_pos, keys, "key", k_flag, _clip_window(blk, notes, 1)) if keys else None
    if k is None:
        k = np.ones(len(k_pos), bool)
    said = []
    if rows is not None:
        lo, hi = _within(rows, q_pos)
        said.append(f"positions {lo}–{hi}" if keys == rows else f"{titles[0]} {lo}–{hi}")
    if keys is not None and keys != rows:
        lo, hi = _within(keys, k_pos)
        said.append(f"{titles[1]} {lo}–{hi}")
    return Window(q, k, said)


def span_map(mv: MapView, rows: tuple[int, int] | None, keys: tuple[int, int] | None = None) -> MapView:
    """``mv`` cut to query positions ``rows`` and key positions ``keys`` (inclusive; None: all, except a
    self-attention map's keys, which take ``rows``), its title saying which."""
    if rows is None and keys is None:
        return mv
    win = window(mv.block, mv.notes, (mv.q_pos, mv.k_pos), (mv.y_title, mv.x_title), rows, keys)
    q, k, said = win.q, win.k, win.said
    qi, ki = np.nonzero(q)[0], np.nonzero(k)[0]
    return replace(
        mv,
        matrix=mv.matrix[np.ix_(qi, ki)],
        q_labels=[mv.q_labels[i] for i in qi],
        k_labels=[mv.k_labels[i] for i in ki],
        q_pos=np.asarray(mv.q_pos)[qi],
        k_pos=np.asarray(mv.k_pos)[ki],
        q_special=[mv.q_special[i] for i in qi] if mv.q_special else [],
        k_special=[mv.k_special[i] for i in ki] if mv.k_special else [],
        k_values=[mv.k_values[i] for i in ki] if mv.k_values is not None else None,
        title=" · ".join([mv.title, *said]),
    )
