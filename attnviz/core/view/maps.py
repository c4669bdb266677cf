"""The heatmap: :class:`MapView` and :func:`compute_map`, the matrix a selection points at.

Order: aggregate -> generation step -> a padded row's padding -> hide special tokens -> keep mass; then labels,
titles and the colour scale's top.  Alignment, token links, the strip, image regions and the comparison all start
from this map.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from attnviz.core import reduce
from attnviz.core.attention import AttentionResult, Block
from attnviz.core.view.clip import clip_cut
from attnviz.core.view.colourbar import HIDDEN_NOTE
from attnviz.core.view.labels import clean_labels
from attnviz.core.view.overview import scale_top
from attnviz.core.view.palette import DEFAULT_SCALE
from attnviz.core.view.selection import (
    Selection,
    ViewError,
    _pad,
    _special,
    blk_len,
    clamp,
    frames_reduction,
    head_matrix,
    head_what,
    hide_mask,
    result_blocks,
)
from attnviz.core.view.steps import n_steps, step_rows


@dataclass
class MapView:
    """One drawable map: ``matrix[Tq, Tk]`` with labels and original positions."""

    matrix: np.ndarray
    q_labels: list[str]
    k_labels: list[str]
    q_pos: np.ndarray  # original query position of each row
    k_pos: np.ndarray  # original key position of each column
    title: str
    block: Block | None = None
    q_special: list[bool] = field(default_factory=list)
    k_special: list[bool] = field(default_factory=list)
    x_title: str = "key"
    y_title: str = "query"
    notes: list[str] = field(default_factory=list)  # "step 2/5", "top 90% mass" (also in the title)
    vmax: float = 1.0  # the top of the colour scale (the selection's scale)
    scale: str = DEFAULT_SCALE
    k_values: list[float] | None = None  # a time series' value at each drawn key column (plotted above the map)
    k_values_title: str = "value"  # what those values are (the series' axis title, on screen and in figures)
    # a signed map (model A minus model B): a diverging colour map from vmin to vmax, centred on 0
    diverging: bool = False
    vmin: float = 0.0
    by_hand: bool = False  # vmax is the top set by hand (Selection.vmax), not the scale's: the colour bar says so
    spanned: bool = False  # vmax is a drawn window's top (core/view/span.py: span_top), and the colour bar says so
    # the row scale's divisors: each row's largest weight over all its keys (None: from ``matrix`` when asked; a
    # window of positions keeps its rows' whole-row tops, so a zoomed view and its export divide alike)
    row_tops: np.ndarray | None = None

    def value(self, row: int, col: int) -> float:
        return float(self.matrix[row, col])


def row_stretched(mv: MapView) -> bool:
    """Whether ``mv`` is drawn on the row scale (each row over its maximum): not with a top set by hand, nor a
    signed difference (its ±max |A − B| is its own)."""
    return mv.scale == "row" and not mv.by_hand and not mv.diverging


def whole_row_tops(mv: MapView) -> np.ndarray:
    """Each row's largest weight over all its keys (``mv.row_tops`` when a window of the map kept them)."""
    if mv.row_tops is not None:
        return mv.row_tops
    with np.errstate(all="ignore"):  # (an all-NaN row: NaN, drawn as NaN is)
        return np.nanmax(mv.matrix, axis=1) if mv.matrix.size else np.zeros(mv.matrix.shape[0], np.float32)


def drawn_cells(mv: MapView) -> np.ndarray:
    """The numbers the colours are drawn from, on screen and in figures: the weights, or on the row scale each row
    divided by its largest weight (an all-zero row stays 0).  The hover read-out still says the weight."""
    if not row_stretched(mv):
        return mv.matrix
    tops = whole_row_tops(mv).astype(np.float32)[:, None]
    out = np.zeros(mv.matrix.shape, np.float32)
    np.divide(mv.matrix, tops, out=out, where=tops > 0)
    return out


def images_note(result: AttentionResult, blk: Block) -> str | None:
    """One prompt's several images in a vision tower: its map holds each image's block on the diagonal, in order
    (its keys say img1(r,c), img2(r,c), ...); the title says so.  None for any other block."""
    several = len(result.vision_grids()) if blk.stack == "encoder" else 0
    return f"images 1–{several} on the diagonal" if several > 1 else None


def compute_map(
    result: AttentionResult, sel: Selection, blocks: list[Block] | None = None, keep_pads: bool = False
) -> MapView:
    """The matrix ``sel`` points at.  Order: aggregate -> generation step -> padding -> hide special -> keep mass.

    A padded batch's row drops its padding (rows and columns: what the row is alone; a pad's key has no weight,
    so nothing is renormalised), unless ``keep_pads`` (views that index the matrix by position and pick their
    own queries: Image regions, the strip)."""
    blocks = result_blocks(result, sel, blocks)
    if not blocks:
        raise ViewError("this result has no attention maps; nothing to draw", param="model")
    sel = clamp(sel, blocks)
    blk = blocks[sel.block]
    m, what = head_matrix(blk, sel)
    m = np.asarray(m, dtype=np.float32)
    notes: list[str] = []
    q_pos, k_pos = np.arange(m.shape[0]), np.arange(m.shape[1])
    n = step_rows(result, blk, sel.step)
    if n is not None:
        q_pos = q_pos[:n]
        if blk.kind == "self":
            k_pos = k_pos[:n]
        m = m[np.ix_(q_pos, k_pos)]
        notes.append(_step_note(result, sel))
    cut = clip_cut(result, blk, sel)
    if cut is not None:  # a speech clip's frames: the padding after it is not the user's sound
        q_pos, k_pos = q_pos[: cut.rows], k_pos[: cut.keys]  # (None: the axis whole)
        m = m[: len(q_pos), : len(k_pos)]
        notes.append(cut.note)
    if not keep_pads:
        pq, pk = _pad(blk.query_axis, q_pos, blk_len(blk, 0)), _pad(blk.key_axis, k_pos, blk_len(blk, 1))
        if pq.any() or pk.any():
            q_pos, k_pos = q_pos[~pq], k_pos[~pk]
            m = m[np.ix_(~pq, ~pk)]
    q_sp = _special(blk.query_axis, q_pos, blk_len(blk, 0))
    k_sp = _special(blk.key_axis, k_pos, blk_len(blk, 1))
    m, q_pos, k_pos, q_sp, k_sp = _hide(m, q_pos, k_pos, q_sp, k_sp, sel.hide_special, notes)
    if sel.keep < 1.0:
        m = reduce.keep_mass(m, max(sel.keep, 1e-3))
    notes += _after_hiding(result, blk, sel)
    # a row is named by the token it reads (its input), as its column is: the map is tokens × tokens, its diagonal a
    # token attending to itself (a decoder row's hover says the word it chose too; the words' views name rows by
    # their output: core/view/steps.py says which view does which, and why)
    q_labels = clean_labels(blk.query_axis.labels, q_pos)
    k_labels = clean_labels(blk.key_axis.labels, k_pos)
    xt, yt = ("source (key)", "target (query)") if blk.kind == "cross" else ("key", "query")
    title = " · ".join([blk.name, what, *notes])
    top = scale_top(result, sel, sel.block, m, blocks)
    vals = blk.key_axis.values
    k_values = [vals[i] for i in k_pos] if vals is not None else None
    return MapView(
        m,
        q_labels,
        k_labels,
        q_pos,
        k_pos,
        title,
        blk,
        q_sp.tolist(),
        k_sp.tolist(),
        xt,
        yt,
        notes,
        top,
        sel.scale,
        k_values,
        k_values_title=series_title(result),
        by_hand=bool(sel.vmax),
    )


SERIES_DOTS = 200  # a series of at most this many values is drawn with a dot on each (more: the line alone)


def series_dots(values: list[float]) -> bool:
    """Whether the series above a map marks each value with a dot, on screen and in figures: a 30 s clip's 1,499
    frames' dots ran together into a thick band that hid the line."""
    return len(values) <= SERIES_DOTS


def series_title(result: AttentionResult) -> str:
    """What a map's series above it measures: a sound's frames carry their loudness (dB relative to full scale,
    the waveform runtime's levels), any other series (a time-series model's inputs) its own values."""
    return "loudness (dBFS)" if result.audio is not None else "value"


def _step_note(result: AttentionResult, sel: Selection) -> str:
    return f"step {sel.step + 1}/{n_steps(result, sel.batch)}"


def _after_hiding(result: AttentionResult, blk: Block, sel: Selection) -> list[str]:
    """:func:`compute_map`'s notes after "hidden special tokens": the kept mass, several images on the diagonal."""
    notes = [f"top {round(sel.keep * 100)}% mass"] if sel.keep < 1.0 else []
    diagonal = images_note(result, blk)
    return notes + ([diagonal] if diagonal else [])


def map_notes(result: AttentionResult, sel: Selection, blocks: list[Block] | None = None) -> list[str]:
    """The notes :func:`compute_map` gives ``sel``'s map (the step, the kept mass, several images on the diagonal)
    less "hidden special tokens", without making the map (the overview figure's: a tower's frames are never laid
    out for it)."""
    blocks = result_blocks(result, sel, blocks)
    if not blocks:
        raise ViewError("this result has no attention maps; nothing to draw", param="model")
    sel = clamp(sel, blocks)
    blk = blocks[sel.block]
    step = [_step_note(result, sel)] if step_rows(result, blk, sel.step) is not None else []
    cut = clip_cut(result, blk, sel)
    return step + ([cut.note] if cut is not None else []) + _after_hiding(result, blk, sel)


@dataclass
class MapRows:
    """Rows of the map a selection points at (Image regions reads one query's row, or the mean of an image's
    patches' rows): ``n_rows`` queries, the map's ``title``, and ``sums(lo, hi)`` the sum of rows ``lo``–``hi - 1``
    as :func:`compute_map`'s matrix holds them (its keys by position, pads kept)."""

    n_rows: int
    title: str
    sums: Callable[[int, int], np.ndarray]

    def row(self, q: int) -> np.ndarray:
        return self.sums(q, q + 1)

    def mean(self, lo: int, hi: int) -> np.ndarray:
        """The mean of rows ``lo``–``hi - 1``, as ``matrix[lo:hi].mean(axis=0)`` gives it."""
        lo, hi = max(lo, 0), min(hi, self.n_rows)
        with np.errstate(invalid="ignore", divide="ignore"):  # no rows: NaN, as numpy's mean of none
            return np.true_divide(self.sums(lo, hi), max(hi - lo, 0))


def map_rows(result: AttentionResult, sel: Selection, blocks: list[Block] | None = None) -> MapRows:
    """:func:`compute_map` with ``keep_pads``, read by rows.  A tower's frames (:class:`FramesMap`) are read frame by
    frame (:meth:`FramesMap.row_sum`: the blocks the rows lie in), never laid out as the whole ``[Tq, Tk]``
    (17 frames of 1,024 patches: 1.2 GB), where nothing else changes the map's numbers (a generation step, hidden
    tokens, kept mass): the same numbers as the matrix's rows.  Any other map: the matrix's rows."""
    blocks = result_blocks(result, sel, blocks)
    if blocks:
        sel = clamp(sel, blocks)
        blk = blocks[sel.block]
        frames = frames_reduction(blk, sel)
        plain = step_rows(result, blk, sel.step) is None and not sel.hide_special and sel.keep >= 1.0
        if frames is not None and plain:
            fn, layers = frames
            title = " · ".join([blk.name, head_what(blk, sel), *filter(None, [images_note(result, blk)])])
            return MapRows(layers[0].shape[2], title, lambda lo, hi: layers[0].row_sum(blk.batch, lo, hi, fn, layers))
    mv = compute_map(result, sel, blocks, keep_pads=True)
    return MapRows(mv.matrix.shape[0], mv.title, lambda lo, hi: mv.matrix[lo:hi].sum(axis=0))


def _hide(
    m: np.ndarray,
    q_pos: np.ndarray,
    k_pos: np.ndarray,
    q_sp: np.ndarray,
    k_sp: np.ndarray,
    on: bool,
    notes: list[str],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Drop special rows / columns (each axis on its own) and renormalise rows."""
    if not on or not (q_sp.any() or k_sp.any()):
        return m, q_pos, k_pos, q_sp, k_sp
    dq, dk = hide_mask(q_sp), hide_mask(k_sp)
    if not (dq.any() or dk.any()):
        return m, q_pos, k_pos, q_sp, k_sp
    m = reduce.drop_positions(m, dq, dk, renormalize=True)
    notes.append(HIDDEN_NOTE)
    return m, q_pos[~dq], k_pos[~dk], q_sp[~dq], k_sp[~dk]
