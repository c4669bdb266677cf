"""Image regions, the view: one query's attention over the image patches (:func:`overlay_view`).

A tiled VLM image's global image is drawn beside the tiles on the same scale (:class:`OverlayPanel`); the query
patch's outline (:meth:`OverlayView.query_rect`) is where the screen and the figure draw it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from attnviz.core.attention import AttentionResult, Block, PatchGrid
from attnviz.core.view.heat import overlay_alpha, upsample
from attnviz.core.view.heat_scale import HeatScale, heat_scale, image_keys_top, kept_top
from attnviz.core.view.labels import clean_label
from attnviz.core.view.maps import MapRows, images_note, map_rows
from attnviz.core.view.patches import (
    GLOBAL_PANEL,
    global_grid,
    image_queries,
    image_source,
    patch_label,
    picture_label,
    pictured,
    query_place,
    step_query,
    words_query,
)
from attnviz.core.view.selection import Selection, ViewError, clamp, result_blocks
from attnviz.core.view.steps import row_outputs

QUERY_OUTLINE = "white"  # the outline of a query patch on the image: screen and figure draw it alike


def _cell_rect(
    grid: PatchGrid, cell: tuple[int, int] | None, width: float, height: float
) -> tuple[float, float, float, float] | None:
    if cell is None:
        return None
    r, c = cell
    cw, ch = width / grid.cols, height / grid.rows
    return c * cw, r * ch, cw, ch


@dataclass
class OverlayPanel:
    """The same query's attention over a second set of the image's tokens, drawn beside the overlay on the same
    picture: a tiled VLM image's global image (Idefics3 / SmolVLM keep the whole picture again at one tile's
    resolution, its own run of tokens after the tiles).  The overlay's colour scale, base and opacity rule, so the
    two panels compare: a word may look at the tiles, the global image or both."""

    name: str
    patch: np.ndarray  # [rows, cols] weights
    grid: PatchGrid
    heat: np.ndarray
    alpha: np.ndarray
    share: float  # the fraction of the query row's weight on these keys
    query_cell: tuple[int, int] | None = None

    def query_rect(self, width: float, height: float) -> tuple[float, float, float, float] | None:
        return _cell_rect(self.grid, self.query_cell, width, height)

    @property
    def caption(self) -> str:
        return f"{self.name} · {self.share:.0%} of the row"


def is_patch_label(label: str) -> bool:
    """Whether a query's name is a patch's (:func:`patch_label`'s, a tile's, the global image's): a clicked patch,
    of which the view keeps one."""
    return re.fullmatch(rf"({GLOBAL_PANEL} |tile \d+ )?patch \(\d+, \d+\)", label) is not None


TILES_PANEL = "tiles"


@dataclass
class OverlayView:
    """One query's attention over the image patches, and the heat to lay over the image."""

    patch: np.ndarray  # [rows, cols] weights
    grid: PatchGrid
    query_label: str
    block_index: int
    heat: np.ndarray  # [H, W] in [0, 1]: the patch map smoothly upsampled, on the colour scale ``colours``
    alpha: np.ndarray  # [H, W] opacity: unattended regions keep the image visible
    vmax: float  # the top of the colour scale in force (colours.vmax)
    title: str
    base: str = "grey"  # what lies under the heat (IMAGE_BASES)
    query_cell: tuple[int, int] | None = None  # (row, col) of the query patch, outlined on the image; None: no patch
    # a tiled VLM image's global image, drawn beside the tiles on the same scale (None: one picture)
    global_panel: OverlayPanel | None = None
    share: float = 1.0  # the fraction of the query row's weight on this grid's keys (said beside a global panel)
    query_place: str = ""  # " (word 5)" where another query bears the same word (:func:`query_place`)
    # the colour scale the heat is on (the selection's scale and log box); None: stretched to this map, linear
    colours: HeatScale | None = None

    @property
    def scale(self) -> HeatScale:
        """The colour scale in force: its range, the colour bar's words and the info line's note."""
        return self.colours or HeatScale("map", False, 0.0, self.vmax)

    @property
    def query_text(self) -> str:
        """``query “a” (word 5)``: the query as the title and the screen's info line name it."""
        return f"query “{self.query_label}”{self.query_place}"

    def query_rect(self, width: float, height: float) -> tuple[float, float, float, float] | None:
        """``(x, y, w, h)`` of the query patch on an image ``width`` × ``height`` (pixel edges at 0 and width), or
        None: the outline the screen and the figure draw around the patch whose attention is shown."""
        return _cell_rect(self.grid, self.query_cell, width, height)

    @property
    def peak(self) -> str:
        """Where the drawn weights peak, each patch named as a clicked one is (:func:`patch_label`): "peak at tile 2
        patch (2, 4)", and with a global image beside the tiles " · global image 6×6 beside them, peak at global
        image patch (2, 5)" (the screen's info line)."""
        out = f"peak at {_peak_label(self.grid, self.grid, self.patch)}"
        g = self.global_panel
        if g is not None:
            out += f" · {g.name} {g.grid.rows}×{g.grid.cols} beside them, peak at {_peak_label(self.grid, g.grid, g.patch)}"
        return out

    @property
    def captions(self) -> tuple[str, ...]:
        """The panels' captions above the tiles and the global image, with the row's weight on each (none for one
        picture): the screen and the figure write the same."""
        if self.global_panel is None:
            return ()
        return (f"{TILES_PANEL} · {self.share:.0%} of the row", self.global_panel.caption)


@dataclass
class _Drawn:
    """What an overlay of a selection is drawn from: the image block, its grid and kind, the map's rows and the
    query choices (:func:`image_queries`)."""

    result: AttentionResult  # the result seen through the image chosen (one prompt's several)
    blocks: list[Block]
    which: str | None  # that image's name, where there are several
    bi: int
    grid: PatchGrid
    kind: str
    mv: MapRows
    queries: list[tuple[str, int]]
    sel: Selection  # the selection the rows were read for (the block's, clamped)


def _drawn(result: AttentionResult, sel: Selection, blocks: list[Block] | None) -> _Drawn:
    blocks = result_blocks(result, sel, blocks)
    which = picture_label(result, sel.picture)
    result = pictured(result, sel.picture, sel.batch)
    src = image_source(result, blocks, sel.block, sel.image_from)
    if src is None:
        raise ViewError(
            "image regions need an image input (a vision or captioning model); this result has no image patches",
            param="image",
        )
    bi, grid, kind = src
    s = clamp(
        sel.with_(
            block=bi,
            step=-1,
            hide_special=False,
            keep=1.0,
            # rollout multiplies square self-attention maps: over words' or a pooling head's queries, their mean
            mode="mean" if kind != "self" and sel.mode == "rollout" else sel.mode,
            # the overlay's scale is its own (heat_scale): the rows need no "shared" top of the block's thumbnails
            scale="fixed",
        ),
        blocks,
    )
    # the map's rows and keys by position (its queries skip pads), read by rows: a tower's frames are never laid out
    mv = map_rows(result, s, blocks)
    return _Drawn(result, blocks, which, bi, grid, kind, mv, image_queries(result, blocks[bi], grid), s)


def _default_query(d: _Drawn, step: int) -> int:
    """Index into ``d.queries`` of the query the view opens on, :func:`default_image_query`'s rule."""
    if not words_query(d.result, d.blocks[d.bi]) or len(d.queries) < 2:
        return 0
    if step >= 0:  # a step chosen: the word generated at that step
        return step_query(d.result, d.blocks[d.bi], d.queries, step)
    # all steps: the word whose attention is most focused (the highest patch weight of any word's row)
    peaks = [float(np.max(d.grid.to_image(d.mv.row(min(r, d.mv.n_rows - 1))))) for _, r in d.queries]
    return int(np.argmax(peaks))


def default_image_query(result: AttentionResult, sel: Selection, blocks: list[Block] | None = None) -> int:
    """Index into :func:`image_queries` of the query Image regions open on where none is chosen: the window's tab
    and ``attnviz figure --view image`` without ``--query`` draw the same one (the window opened on the most
    focused word, the figure on the first).  A self-attention over patches: its first choice (CLS, or the patches'
    mean).  Words over the image (a captioner's, a VLM's tower read by a pooling head): with a step chosen, the
    word generated at that step; with all steps, the word whose attention is most focused on the image (the highest
    patch weight of any word's row), where a first word ("a") usually looks everywhere."""
    return _default_query(_drawn(result, sel, blocks), sel.step)


def overlay_view(
    result: AttentionResult,
    sel: Selection,
    size: tuple[int, int] | None = None,
    blocks: list[Block] | None = None,
) -> OverlayView:
    """The image-regions overlay: ``sel.query`` row (None: :func:`default_image_query`) of the image block, over
    image ``sel.picture`` of a prompt that holds several, on the selection's colour scale (``sel.vmax``: its top
    set by hand, whatever ``sel.image_scale``)."""
    d = _drawn(result, sel, blocks)
    original = result
    result, blocks, which = d.result, d.blocks, d.which
    bi, grid, kind, mv, queries = d.bi, d.grid, d.kind, d.mv, d.queries
    rows = [r for _, r in queries]
    query = sel.query if sel.query is not None and (sel.query in rows or 0 <= sel.query < mv.n_rows) else None
    if query is None:
        query = rows[_default_query(d, sel.step)]
    cell = None
    vec = _query_row(mv, grid, query)
    if query < 0:
        label = "all patches (mean)"
    else:
        label = dict((r, lab) for lab, r in queries).get(query) or _row_name(result, blocks[bi], query)
        if kind == "self" and grid.cell(query) is not None:  # a patch as the query
            label = patch_label(grid, query)
            cell = grid.cell(query)
    patch = grid.to_image(vec)
    whole = global_grid(grid, len(vec))
    if whole is not None and query >= 0 and whole.cell(query) is not None:  # a global image's token as the query
        label = patch_label(grid, query)
    if size is None:
        shape = np.asarray(result.image).shape if result.image is not None else (grid.rows * 16, grid.cols * 16)
        size = (int(shape[0]), int(shape[1]))
    # the top of the drawn (smoothed) weights, the stretched scale's top: sampled 8 times a cell whatever the
    # drawing's size, so the screen (finer) and the figure (the image's pixels) share one scale; with a global
    # image beside the tiles, the top of both (one colour bar: which of the two a word looks at shows)
    drawn = _drawn_top(patch) if whole is None else max(_drawn_top(patch), _drawn_top(whole.to_image(vec)))
    # (the shared top, per block, batch row, image, attention over it and query: the rows every head gives)
    key = (bi, d.sel.batch, sel.picture, sel.image_from, query)
    hs = heat_scale(
        sel.image_scale, sel.log, drawn, lambda: kept_top(original, key, lambda: _shared_top(d, query, whole)), sel.vmax
    )
    glob = None
    if whole is not None:
        gpatch = whole.to_image(vec)
        gheat = hs.heat(upsample(gpatch, size))
        total = max(float(np.sum(vec)), 1e-12)
        gcell = whole.cell(query) if query >= 0 else None
        glob = OverlayPanel(
            GLOBAL_PANEL, gpatch, whole, gheat, overlay_alpha(gheat, sel.image_base), float(gpatch.sum()) / total, gcell
        )
    heat = hs.heat(upsample(patch, size))
    alpha = overlay_alpha(heat, sel.image_base)
    # the map's title less its note of several images on the diagonal: the overlay draws one of them, named
    what = [p for p in mv.title.split(" · ")[1:] if p != images_note(result, blocks[bi])]
    place = query_place(queries, query)
    title = " · ".join([blocks[bi].name, *what, *([which] if which else []), f"query “{label}”{place}"])
    share = float(patch.sum()) / max(float(np.sum(vec)), 1e-12) if glob is not None else 1.0
    return OverlayView(
        patch, grid, label, bi, heat, alpha, hs.vmax, title, sel.image_base, cell, glob, share, place, hs
    )


def _row_name(result: AttentionResult, blk: Block, row: int) -> str:
    """A query row that is no choice's (``attnviz figure --query`` on a row before a VLM's image): a decoder's words
    named by the word the row produced, as the choices are (:func:`row_outputs`); any other row by its token."""
    if blk.stack == "decoder" and words_query(result, blk):
        out = row_outputs(result, blk, [row])
        if out:
            return clean_label(out[0][1])
    return clean_label(blk.query_axis.labels[row])


def _peak_label(grid: PatchGrid, cells: PatchGrid, patch: np.ndarray) -> str:
    """The name of ``patch``'s top cell (``cells``: the grid it lies on, ``grid`` or its global image's)."""
    r, c = np.unravel_index(int(np.argmax(patch)), patch.shape)
    return patch_label(grid, cells.key(int(r), int(c)))


def _query_row(mv: MapRows, grid: PatchGrid, query: int) -> np.ndarray:
    """Query ``query``'s row over the block's keys; below 0, the mean of the grid's own patches' rows (one prompt's
    several images: this image's, not the next one's)."""
    return mv.mean(grid.offset, grid.end) if query < 0 else mv.row(min(query, mv.n_rows - 1))


def _shared_top(d: _Drawn, query: int, whole: PatchGrid | None) -> float:
    """The shared scale's top: the largest weight any head of any layer of the image block gives the image's keys
    from ``query``'s row (the grid's, and a global image's), whatever the selection aggregates: the heads compared
    on one scale, as the token maps' shared scale is the block's heads' (an aggregate lies under it; rollout, whose
    products may exceed any head, is clipped at it, as on the Head map)."""
    blk = d.blocks[d.bi]
    tops = (
        image_keys_top(
            _query_row(map_rows(d.result, d.sel.with_(mode="head", layer=i, head=h), d.blocks), d.grid, query),
            d.grid,
            whole,
        )
        for i in range(blk.n_layers)
        for h in range(blk.heads_in(i))
    )
    top = float(np.fmax.reduce(np.fromiter(tops, float), initial=0.0))  # (a NaN weight is no top)
    return top if top >= 1e-6 else 1e-6


def _drawn_top(patch: np.ndarray) -> float:
    r, c = patch.shape
    return max(float(upsample(patch, (8 * r, 8 * c)).max()), 1e-6)
