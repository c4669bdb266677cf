"""A window of positions cut out of a map (``attnviz figure --span LO-HI``): a 2,048-token head map printed whole
is a page of cells each thinner than a line, its labels one in sixteen; a paper shows the stretch it discusses.

Positions are the map's own (``MapView.q_pos`` / ``k_pos``: what ``--query`` and the window's hover read-out
count), so a window means the same tokens whether special tokens are hidden or not.  A self-attention map's keys
take the rows' window unless a key window is given; a cross-attention map's keys (another sequence) stay whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import Block
from attnviz.core.view.clip import clip_cut
from attnviz.core.view.maps import MapView, row_stretched, whole_row_tops
from attnviz.core.view.palette import SPAN_SCALES
from attnviz.core.view.selection import Selection, blk_len

Span = tuple[int, int]


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
    row_tops = whole_row_tops(mv)[qi] if row_stretched(mv) else None  # (each row over its whole row's top)
    return replace(
        mv,
        row_tops=row_tops,
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


def _cells(pos: np.ndarray, span: Span | None) -> slice:
    """The run of a map's rows (or columns) whose positions lie in ``span`` (None: all).  A map's positions rise
    (hidden tokens and pads only leave gaps), so the positions in a window are one run of cells: a view, not a copy
    (a 2,048-token head's window read for the "shared" top of 144 heads)."""
    pos = np.asarray(pos)
    if span is None:
        return slice(0, len(pos))
    return slice(int(np.searchsorted(pos, span[0], "left")), int(np.searchsorted(pos, span[1], "right")))


def _window_max(mv: MapView, rows: Span | None, keys: Span | None) -> float:
    """The largest weight of ``mv`` in the window (keys take the rows' window on a self-attention map, as
    :func:`span_map` cuts it); 0 where the window holds none of its cells."""
    if keys is None and mv.block is not None and mv.block.kind == "self":
        keys = rows
    cut = mv.matrix[_cells(mv.q_pos, rows), _cells(mv.k_pos, keys)]
    return float(np.nanmax(cut)) if cut.size and not np.isnan(cut).all() else 0.0


def stretches(mv: MapView) -> bool:
    """Whether ``mv``'s colour scale follows what is drawn of it: "map" and "shared" do, a fixed scale, a top set
    by hand and a signed difference (±max |A − B|, its own) do not."""
    return mv.scale in SPAN_SCALES and not mv.by_hand and not mv.diverging


def span_top(
    mv: MapView, sel: Selection, rows: Span | None, keys: Span | None, head_of: Callable[[Selection], MapView]
) -> float:
    """The top of ``sel``'s colour scale over what is drawn of ``mv``: query positions ``rows`` and key positions
    ``keys`` (a self-attention map's keys take ``rows`` when None).  "map": the window's largest weight; "shared":
    the largest any head of the block gives in the window (``head_of(sel)``: that head's map, as ``mv`` was made,
    e.g. :func:`~.frame_map.head_map`); a fixed scale, a top set by hand and a signed difference keep ``mv``'s."""
    if (rows is None and keys is None) or not stretches(mv):
        return mv.vmax
    if mv.scale == "map":
        return max(_window_max(mv, rows, keys), 1e-6)
    blk = mv.block
    assert blk is not None  # a "shared" top is a block's
    plain = sel.with_(mode="head", scale="fixed", vmax=None)  # (fixed: each head's own top is not needed)
    tops = (
        _window_max(head_of(plain.with_(layer=layer, head=h)), rows, keys)
        for layer in range(blk.n_layers)
        for h in range(blk.heads_in(layer))
    )
    return max(max(tops, default=0.0), 1e-6)


def drawn_span(
    mv: MapView,
    sel: Selection,
    rows: Span | None,
    keys: Span | None,
    head_of: Callable[[Selection], MapView],
) -> MapView:
    """:func:`span_map`'s window with the colour scale's top over what it draws (:func:`span_top`): the whole
    map's top, kept, was a causal map's row 0 (1.0) however far from it the window lay."""
    cut = span_map(mv, rows, keys)
    if cut is mv:
        return mv
    return replace(cut, vmax=span_top(mv, sel, rows, keys, head_of), spanned=stretches(mv))
