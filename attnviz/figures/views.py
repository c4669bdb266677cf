"""One draw function per view: ``draw(result, selection, style) -> Figure``, plus a check saying whether it applies.

Each draws what the view model (:mod:`attnviz.core.view`) computes for the window's own
:class:`~attnviz.core.view.Selection` -- matrices, labels, titles, colour-bar words -- and decides nothing about
what is shown.  The registry :data:`VIEW_DRAWERS` maps the view name to ``(draw, why_not)`` where
``why_not(result)`` returns None when the view can be drawn for that result, else the reason (one line).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import replace

import numpy as np
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.collections import LineCollection
from matplotlib.colors import LogNorm, Normalize, to_rgba
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.transforms import offset_copy

from attnviz import AttnvizError
from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult
from attnviz.figures import select as sel_
from attnviz.figures.audio import draw_audio
from attnviz.figures.cells import as_cells, as_vector_cells, photo_overlay, raster_only
from attnviz.figures.frames_key import draw_key, key_layout
from attnviz.figures.layout import (
    CHAR_W,
    FIT,
    LINE,
    PT,
    clamp,
    colormap_for,
    display_label,
    display_labels,
    fit_title,
    make_title,
    new_figure,
    text_width_in,
    text_width_pt,
    title_height,
    token_ticks,
    wrap_label,
)
from attnviz.figures.spec import FigureStyle

CBAR_IN = 0.6  # colour bar + its tick labels


_cmap = colormap_for  # (the audio view's module draws with the same lookup)


# ---------------------------------------------------------------------------------------------
# heatmap-shaped views (heatmap, alignment)


SERIES_IN = 0.9  # inches: a time series plotted above its map
# a map of few rows over a long source axis (a speech model's 200+ frames of 20 ms, a few words): sized to its
# labels it drew 16 x 1.7 inches, its rows a line each.  It takes a page's width, its map no flatter than 4:1
LONG_KEYS_IN = 7.0
MAX_MAP_ASPECT = 4.0
MAX_ROW_IN = 0.4  # (one or two rows do not stand half a page tall)
LONG_KEYS_RATIO = 4  # "few rows": at most a quarter as many rows as columns
WIDEST_IN = 16.0


def _long_keys(nq: int, nk: int, times: bool, pitch: float) -> bool:
    """A long source axis over few rows: a sound's frames (labelled at round times, so a narrower axis loses no
    label's words), or more tokens than twice the labels the widest figure holds (thinned at any width)."""
    return nk >= LONG_KEYS_RATIO * nq and (times or nk * pitch > 2 * WIDEST_IN)


def _position_in(pos, fs: float, n: int) -> float:
    """Inches an axis's labels grow by for their positions (" ·2047") where its ``n`` tokens are more than the
    widest page labels (thinned however it is sized; the layout engine makes room for the rest)."""
    if pos is None or not len(pos) or n * fs * FIT * PT <= WIDEST_IN:
        return 0.0
    return text_width_pt(f"{vm.POSITION_MARK}{int(np.max(pos))}", fs) * PT


def _heatmap_figure(
    spec: FigureStyle,
    log: bool,
    top: float,
    m: np.ndarray,
    q_labels: list[str],
    k_labels: list[str],
    q_special: list[bool] | None,
    k_special: list[bool] | None,
    title: str,
    xlabel: str,
    ylabel: str,
    cbar_label: str,
    highlight_row: int | None = None,
    series: list[float] | None = None,
    cmap=None,
    norm=None,
    series_title: str = "value",
    positions: tuple[np.ndarray, np.ndarray] | None = None,
):
    """``positions``: the (query, key) positions of the rows and columns, which a thinned axis's labels say.
    ``series``: a time series' value per key column, plotted above the map on the same columns (the screen's
    Head map draws the same), its axis titled ``series_title``.  ``cmap`` / ``norm``: a signed map's diverging colours and symmetric range (default:
    the style's map colours, the weights' range)."""
    fs = float(spec.font_size)
    nq, nk = m.shape
    pitch = fs * LINE * PT  # inches per legible label
    times = vm.frame_step(k_labels) is not None  # the keys are a sound's frames, labelled at round times
    long_keys = _long_keys(nq, nk, times, pitch) and q_labels != k_labels
    level = long_keys and times  # a long time axis under few rows: its times read level, as a time axis's do
    q_pos, k_pos = positions if positions is not None else (None, None)
    # tick labels + axis title; an axis with more tokens than any page labels says their positions too ("the ·1023")
    ylab_in = text_width_in(q_labels, fs) + _position_in(q_pos, fs, nq) + 0.3
    xlab_in = (pitch if level else text_width_in(k_labels, fs) + _position_in(k_pos, fs, nk)) + 0.3
    frame_w = ylab_in + CBAR_IN + 0.1
    fixed = spec.fixed_width
    if fixed is not None:
        width = fixed
    else:  # sized so every key label fits; a long source axis for few rows: a page's width (its labels thinned)
        width = clamp(frame_w + nk * pitch, 2.4, LONG_KEYS_IN if long_keys else 16.0)
    map_w = max(width - frame_w, 0.1)
    cell = map_w / nk
    title = fit_title(title, width, fs + 1)
    title_in = title_height(title, fs + 1)
    frame_h = title_in + xlab_in + 0.1
    # square cells, unless that makes the map much taller than wide; rows that could all be labelled
    # within a page get the label pitch (a tall alignment of many generated words stays readable).  Not a
    # self-attention map (the same tokens on both axes): stretched to the pitch at a column's width, a 32-token
    # map drew cells twice as tall as wide; it keeps square cells, its rows thinned as its columns are
    row = min(cell, max(pitch, 1.6 * map_w / nq))
    if nq * pitch <= max(1.6 * map_w, 6.0) and q_labels != k_labels:
        row = max(row, pitch)
    if long_keys:  # a few rows under hundreds of columns: a band no flatter than MAX_MAP_ASPECT, not a line
        row = max(row, min(map_w / MAX_MAP_ASPECT / nq, MAX_ROW_IN))
    height = clamp(frame_h + nq * row, 1.4, 16.0 if fixed is None else 10.0)
    map_h = max(height - frame_h, 0.1)

    sax = None
    if series is not None:
        height = min(height + SERIES_IN, 16.0 if fixed is None else 10.0 + SERIES_IN)
        fig = new_figure(spec, width, height)
        sax, ax = fig.subplots(
            2, 1, sharex=True, gridspec_kw={"height_ratios": [SERIES_IN, max(height - SERIES_IN, 0.1)]}
        )
        dots = {"marker": "o", "markersize": 1.5} if vm.series_dots(series) else {}
        sax.plot(np.arange(len(series)), series, color="0.2", linewidth=0.8, **dots)
        sax.set_ylabel(series_title, fontsize=fs, labelpad=2)
        sax.tick_params(labelbottom=False, labelsize=fs, length=2, width=0.5, pad=1.5)
        for sp in sax.spines.values():
            sp.set_linewidth(0.5)
    else:
        fig = new_figure(spec, width, height)
        ax = fig.add_subplot()
    shown, fq, fk = vm.pool_to(m, *_cells_drawn(spec, map_h, map_w), signed=norm is not None)
    im = as_cells(
        ax.imshow(
            shown,
            cmap=cmap if cmap is not None else _cmap(spec, "heatmap"),
            norm=norm if norm is not None else _norm(spec, log, top),
            aspect="auto",
            interpolation="nearest",
            # pooled: each cell spans its runs of positions, so ticks, the highlighted row and the series stay on them
            **({} if fq == fk == 1 else {"extent": (-0.5, shown.shape[1] * fk - 0.5, shown.shape[0] * fq - 0.5, -0.5)}),
        )
    )
    if fq > 1 or fk > 1:
        ax.set_xlim(-0.5, nk - 0.5)
        ax.set_ylim(nq - 0.5, -0.5)
        cbar_label += vm.pool_note(fq, fk)
    if q_labels == k_labels and sax is None:  # square cells exactly (the sizes above are estimates of the frame)
        ax.set_aspect("equal", adjustable="box")
    token_ticks(ax, "x", k_labels, k_special, nk * cell, fs, rotation=0 if level else 90, focus=None, positions=k_pos)
    token_ticks(ax, "y", q_labels, q_special, map_h, fs, focus=highlight_row, positions=q_pos)
    ax.set_xlabel(xlabel, fontsize=fs, labelpad=2)
    ax.set_ylabel(ylabel, fontsize=fs, labelpad=2)
    for s in ax.spines.values():
        s.set_linewidth(0.5)
    if highlight_row is not None:
        ax.add_patch(Rectangle((-0.5, highlight_row - 0.5), nk, 1, fill=False, edgecolor="white", linewidth=1.0))
        ax.add_patch(Rectangle((-0.5, highlight_row - 0.5), nk, 1, fill=False, edgecolor="black", linewidth=0.5))
    _colorbar(
        fig, im, log, fs, cbar_label, map_h, ax=ax, fraction=0.08, pad=0.02, aspect=max(10, 20 * min(1.0, map_h / 2.5))
    )
    if sax is not None:  # the same space beside the series as the colour bar takes beside the map: columns line up
        fig.colorbar(im, ax=sax, fraction=0.08, pad=0.02).ax.set_visible(False)
    if title:
        (sax or ax).set_title(title, fontsize=fs + 1, loc="center")
    return fig


MAX_CELLS = 2048  # a map side drawn in more cells than this is max-pooled: finer than a print shows (8 in: 256/in)


def _cells_drawn(spec: FigureStyle, map_h: float, map_w: float) -> tuple[int, int]:
    """At most how many cells a map of ``map_h`` x ``map_w`` inches is drawn in: a device pixel each at the
    figure's dpi, and :data:`MAX_CELLS`.  Past that imshow would sample one position in several anyway (a peak
    could fall between the samples), and it colours every position first and a PDF embeds them all: a crafted
    30,000-token map drew for minutes.  Max-pooling (as the window's overview does) keeps every peak."""
    return tuple(min(MAX_CELLS, max(1, math.ceil(inches * spec.dpi))) for inches in (map_h, map_w))  # type: ignore[return-value]


def _norm(style: FigureStyle, log: bool, vmax: float):
    """The view model's colour range: linear 0..vmax, or LOG_DECADES decades below vmax (zeros: lowest colour).
    ``vmax`` is the view model's top (a top set by hand, Selection.vmax, already in it)."""
    lo, hi = vm.colour_range(vmax, log, vmax)
    return LogNorm(vmin=lo, vmax=hi, clip=True) if log else Normalize(lo, hi)


def _colorbar(fig, mappable, log: bool, fs: float, label: str, length_in: float, **kw):
    """A colour bar with a handful of round ticks, its top value labelled, and its label wrapped to the bar's
    length (never clipped)."""
    cb = fig.colorbar(mappable, **kw)
    norm = mappable.norm
    ticks = vm.scale_ticks(norm.vmin, norm.vmax, log)
    cb.set_ticks([t for t, _ in ticks], labels=[text for _, text in ticks])
    cb.ax.tick_params(labelsize=fs, length=2, width=0.5)
    cb.outline.set_linewidth(0.5)
    cb.set_label(wrap_label(label, length_in, fs), fontsize=fs)
    return cb


def _map_figure(
    result: AttentionResult,
    sel: vm.Selection,
    style: FigureStyle,
    mv: vm.MapView,
    highlight_row: int | None = None,
):
    """A :class:`~attnviz.core.view.MapView` as a heatmap figure: the numbers, labels and title the screen draws
    (a signed A − B map on the view model's diverging colours, symmetric about 0)."""
    signed = {"cmap": colormaps[vm.DIFF_CMAP], "norm": Normalize(mv.vmin, mv.vmax)} if mv.diverging else {}
    log = sel.log and not mv.diverging
    fig = _heatmap_figure(
        style,
        log,
        mv.vmax,  # the view model's top of the scale (the selection's scale), as the screen's colour bar
        vm.drawn_cells(mv),  # the weights, or on the row scale each row over its maximum (the screen's cells)
        display_labels(mv.q_labels),
        display_labels(mv.k_labels),
        mv.q_special,
        mv.k_special,
        make_title(result, style, mv.title),
        mv.x_title,
        mv.y_title,
        vm.map_label(mv, log),
        highlight_row,
        mv.k_values,
        **signed,
        series_title=mv.k_values_title,
        positions=(mv.q_pos, mv.k_pos),
    )
    dark = vm.dark_note(mv, log)
    if dark:  # said by `figure` once the figure is written (figure_notes)
        NOTES.setdefault(fig, []).append(dark)
    return fig


# what a drawn figure has to tell its reader beside it (a map almost wholly dark on its scale, a long links page's
# fewer links a token): `figure` says them once it is drawn
NOTES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def figure_notes(fig) -> list[str]:
    """The notes :func:`_map_figure` left for ``fig`` (none for other views)."""
    return list(NOTES.get(fig, ()))


def _query_row(pos, query: int | None) -> int | None:
    """The drawn row of query position ``query`` (None: none asked); refused when a window (``--span``) left it
    out or hiding special tokens took it."""
    if query is None:
        return None
    pos = np.asarray(pos)
    where = np.nonzero(pos == query)[0]
    if not len(where) and len(pos) and not int(pos.min()) <= query <= int(pos.max()):
        raise AttnvizError(
            f"--query {query} lies outside the positions drawn ({int(pos.min())}-{int(pos.max())}); give a query "
            "within --span, or a span that holds it",
            param="query",
        )
    if not len(where):
        raise AttnvizError(
            f"query {query} is a special token hidden by hide_special; pick another query", param="query"
        )
    return int(where[0])


def _spanned(mv: vm.MapView, sel: vm.Selection, style: FigureStyle, head_of) -> vm.MapView:
    """The window of positions ``--span`` / ``--key-span`` ask for (the whole map without them), its colour scale's
    top over the window drawn ("map", "shared": ``head_of(sel)`` makes each head's map of the block)."""
    return vm.drawn_span(mv, sel, style.span, style.key_span, head_of)


def draw_heatmap(result: AttentionResult, sel: vm.Selection, style: FigureStyle):
    # the Head map's: a tower's frames one at a time (sel.frame)
    mv = _spanned(vm.head_map(result, sel), sel, style, lambda s: vm.head_map(result, s))
    return _map_figure(result, sel, style, mv, _query_row(mv.q_pos, sel.query))


def draw_diff(result_a: AttentionResult, result_b: AttentionResult, sel: vm.Selection, style: FigureStyle):
    """Head map's "A − B": model A's map minus model B's for ``sel``, diverging colours centred on 0."""
    mv = _spanned(vm.compute_diff_map(result_a, result_b, sel), sel, style, lambda s: vm.head_map(result_a, s))
    return _map_figure(result_a, sel, style, mv, _query_row(mv.q_pos, sel.query))


def draw_alignment(result: AttentionResult, sel: vm.Selection, style: FigureStyle):
    mv = _spanned(vm.alignment_map(result, sel), sel, style, lambda s: vm.alignment_map(result, s))
    return _map_figure(result, sel, style, mv)


# ---------------------------------------------------------------------------------------------
# overview grid


def _grid_cols(n: int) -> int:
    """Columns for n panels: near square, preferring a layout without empty cells (12 -> 4x3, 8 -> 4x2)."""
    lo = max(1, math.ceil(math.sqrt(n)))
    for c in range(lo, min(n, 2 * lo) + 1):
        if n % c == 0:
            return c
    return min(n, math.ceil(math.sqrt(n * 1.5)))


def draw_overview(result: AttentionResult, sel: vm.Selection, style: FigureStyle):
    spec = style
    blocks = vm.result_blocks(result, sel)
    sel = vm.clamp(sel, blocks)
    bi, block = sel.block, blocks[sel.block]
    # every head of every layer, as on screen; or one layer's heads (checked against the block by resolve)
    layers = [style.only_layer] if style.only_layer is not None else list(range(block.n_layers))
    # the screen's thumbnails: the same filters, max-pooled to the same size (sharp peaks survive at 512 tokens)
    thumbs = vm.thumbnails(result, sel, vm.THUMB, blocks)  # every block: the screen's overview shares one scale
    # the screen's scale: one over every block, or (a speech model's) this block's own, as its bar on screen says
    colours = vm.overview_colours(result, blocks, thumbs, sel.scale, sel.log, sel.vmax, sel.kind_scale)
    top_weight = colours.top_of(bi)
    scale_words = "this block's colour scale" if colours.per_block else "one colour scale"
    maps = {(li, h): thumbs[(bi, li, h)] for li in layers for h in range(block.heads_in(li))}
    notes = vm.map_notes(result, sel, blocks)  # not the map itself: a tower's frames are never laid out for it
    H = max(block.heads_in(li) for li in layers)
    # panels: one row per layer; a single layer wraps its heads into a near-square grid
    if len(layers) == 1:
        ncols = _grid_cols(H)
        cells = [(divmod(h, ncols), layers[0], h) for h in range(H)]
    else:
        ncols = H
        cells = [((r, h), li, h) for r, li in enumerate(layers) for h in range(H)]
    nrows = max(rc[0] for rc, _, _ in cells) + 1
    nq, nk = next(iter(maps.values())).shape
    fs = float(spec.font_size)
    aspect = clamp(nq / nk, 0.25, 4.0)
    one = len(layers) == 1
    row_labels = vm.layer_labels(block)  # "L0", or "L0 win" / "L1 full" where layers attend over different spans
    left = 0.08 if one else max(0.32, 0.12 + 0.55 * fs * PT * max(len(row_labels[li]) for li in layers))
    right, gap = CBAR_IN + 0.3, 0.05
    head_lab = fs * 1.5 * PT  # "H3" above each panel (single layer) or each column
    what = "all layers and heads" if not one else f"layer {layers[0]}, all heads"
    if one and vm.layer_windows(block)[layers[0]]:  # that layer's heads attend within windows (Qwen2.5-VL)
        what += f", within {vm.layer_windows(block)[layers[0]]}"
    if sel.hide_special:
        what += ", special tokens hidden"
    frames = {(li, h): colour for li, h, colour in style.head_frames}
    extra = [style.frames_note] if frames and style.frames_note else []
    # the frames' key under the grid: what their colours say, on which scale (the window's key, the same words)
    key = style.frames_key if frames else None
    off = set(style.heads_off) & set(maps)
    if off:
        extra.append(vm.OFF_NOTE)
    note = vm.windows_note(block)  # what the rows' "win" means, as the screen's block title says
    windows = [note] if note is not None and not one else []
    whole_title = make_title(result, spec, block.name, what, *windows, *notes, scale_words, *extra)
    norm = _norm(style, sel.log, max(top_weight, 1e-6))
    bar_label = colours.label
    tick_texts = [text for _, text in vm.scale_ticks(norm.vmin, norm.vmax, sel.log)]
    # the colour bar's margin holds its tick labels and its label, wrapped to the bar's length: a fixed 0.9 in cut
    # "(fixed 0–1)" off a single-column figure at --font-size 11 (the bar's length depends on the margin: twice
    # more at most, each pass with the margin the last one needed)
    for _ in range(3):
        width = spec.fixed_width or clamp(left + right + ncols * 0.62 + (ncols - 1) * gap, 2.4, 16.0)
        key_at = key_layout(key, width - left - 0.1, fs) if key is not None else None
        # (the bar's bottom tick label, centred on its end, reaches half a line below it)
        bottom = max(0.08, 0.6 * fs * PT) + (key_at.height if key_at is not None else 0.0)
        title = fit_title(whole_title, width, fs + 1)
        top = title_height(title, fs + 1) + head_lab
        pw = max((width - left - right - (ncols - 1) * gap) / ncols, 0.05)
        ph = pw * aspect
        row_h = ph + (head_lab if one else 0.0)
        grid_h = nrows * row_h + (nrows - 1) * gap - (head_lab if one else 0.0)
        lines = wrap_label(bar_label, max(grid_h, 0.9), fs).count("\n") + 1
        # the bar's gap and width, the ticks' length and pad and the label's pad (2 + 3.5 + 4 pt), the tick
        # labels, the label's lines (matplotlib's 1.2 line pitch) and a little to spare
        need = 0.1 + 0.07 + 9.5 * PT + text_width_in(tick_texts, fs) + (1.2 * lines + 0.1) * fs * PT + 0.05
        if need <= right:
            break
        right = need
    height = top + bottom + max(grid_h, 0.9)
    # a head's label on every k-th column where they would touch ("H10H11" read as one at a column's width with
    # 12 heads): the widest label and 2 pt of space within the column pitch
    widest = max(text_width_pt(f"H{h}", fs) for h in range(H))
    every = max(1, math.ceil((widest + 2.0) / ((pw + gap) * 72)))
    fig = new_figure(spec, width, height, constrained=False)
    cmap = _cmap(style, "overview")
    im = None
    for (r, c), li, h in cells:
        y0 = height - top - r * (row_h + gap) - ph
        x0 = left + c * (pw + gap)
        if c == 0 and not one:
            fig.text(
                (left - 0.06) / width, (y0 + ph / 2) / height, row_labels[li], ha="right", va="center", fontsize=fs
            )
        ax = fig.add_axes((x0 / width, y0 / height, pw / width, ph / height))
        ax.set_xticks([])
        ax.set_yticks([])
        for sp in ax.spines.values():
            sp.set_linewidth(0.3)
            if (li, h) in frames:  # the window's frame: this head's divergence from model B
                sp.set_edgecolor(frames[(li, h)])
                sp.set_linewidth(1.6)
        if (r == 0 or one) and c % every == 0:
            ax.set_title(f"H{h}", fontsize=fs, pad=1.5)
        if (li, h) not in maps:  # fewer heads in this layer
            ax.set_axis_off()
            continue
        im = as_cells(ax.imshow(maps[(li, h)], cmap=cmap, norm=norm, aspect="auto", interpolation="nearest"))
        if (li, h) in off:  # switched off, as the window draws it: veiled (it no longer reaches the output), crossed
            veil = tuple(c / 255 for c in vm.OFF_VEIL)
            ax.add_patch(Rectangle((0, 0), 1, 1, transform=ax.transAxes, facecolor=veil, edgecolor="none", zorder=3))
            for ys in ((0, 1), (1, 0)):
                ax.add_line(Line2D((0, 1), ys, transform=ax.transAxes, color=vm.OFF_CROSS, linewidth=1.2, zorder=4))
    if key is not None and key_at is not None:
        draw_key(fig, key, key_at, left, 0.08, ncols * (pw + gap) - gap, fs)
    cb_h = max(grid_h, 0.9)
    cax = fig.add_axes(((width - right + 0.1) / width, (height - top - cb_h) / height, 0.07 / width, cb_h / height))
    _colorbar(fig, im, sel.log, fs, bar_label, cb_h, cax=cax)
    if title:
        fig.text(0.5, 1 - 0.04 / height, title, ha="center", va="top", fontsize=fs + 1)
    return fig


# ---------------------------------------------------------------------------------------------
# token links

LINKS_MAX_IN = 16.0  # a links page's height without a width preset: the heatmap's (it drew 22-in pages)


def _links_note(n: int, per_row: int) -> str:
    """A long input's links page: each of ``n`` query tokens keeps ``per_row`` links (vm.page_links)."""
    kept = "its strongest link" if per_row == 1 else f"its {per_row} strongest links"
    return (
        f"links: {n:,} query tokens on one page: each draws {kept} (of up to {vm.LINKS_PER_ROW}), the labels "
        "thinned to fit; --span LO-HI draws a window's tokens with all their links and labels"
    )


def draw_links(result: AttentionResult, sel: vm.Selection, style: FigureStyle):
    spec = style
    lv = vm.links_view(result, sel)  # the view model's heads (vm.link_heads) or aggregate, as the screen draws
    lv = vm.span_links(lv, style.span, style.key_span)  # --span / --key-span: a window's tokens and their links
    items = [(name, m) for name, _, m in lv.items]
    colours = [c for _, c, _ in lv.items]
    q_only = None if lv.q_pos is None else _query_row(lv.q_pos, sel.query)
    # a long input's page: each token keeps its strongest few links (vm.LINKS_PER_PAGE), else a solid blob
    per_row = vm.page_links(len(lv.q_labels)) if q_only is None else vm.LINKS_PER_ROW
    links = vm.keep_strongest(lv.links, per_row)
    note = _links_note(len(lv.q_labels), per_row) if per_row < vm.LINKS_PER_ROW else None
    q_labels, k_labels = display_labels(lv.q_labels), display_labels(lv.k_labels)
    q_special, k_special = lv.q_special, lv.k_special
    nq, nk = len(q_labels), len(k_labels)
    n = max(nq, nk)
    fs = float(spec.font_size)
    pitch = fs * LINE * PT
    qt, kt = lv.x_titles  # the view model's, as the screen draws them
    lab_q, lab_k = text_width_in(q_labels + [qt], fs), text_width_in(k_labels + [kt], fs)
    title = make_title(result, style, lv.title)
    width = spec.fixed_width or clamp(lab_q + lab_k + 1.9, 2.8, 10.0)
    title = fit_title(title, width, fs + 1)
    entry_in = (max(len(name) for name, _ in items) * CHAR_W * fs + 3.5 * fs) * PT  # handle + text + spacing
    legend_cols = max(1, min(len(items), int((width - 0.2) / entry_in)))
    legend_in = (fs * 1.8 * PT) * math.ceil(len(items) / legend_cols) if len(items) > 1 else 0.0
    top = title_height(title, fs + 1) + fs * 2.2 * PT
    # the key under it all: what a line's width and opacity say, and which links are left out
    key = wrap_label(vm.links_key(lv.vmax, lv.cut, per_row, lv.outside), width - 0.2, fs - 1)
    key_in = (key.count("\n") + 1) * (fs - 1) * LINE * PT + 0.06
    # a page a journal takes: the heatmap's cap (16 in; 10 in at a column's width), the labels thinned to fit
    height = clamp(top + legend_in + key_in + 0.1 + n * pitch, 1.5, LINKS_MAX_IN if spec.fixed_width is None else 10.0)
    fig = new_figure(spec, width, height, constrained=False)
    span_h = height - top - legend_in - key_in - 0.1
    ax = fig.add_axes(
        (
            (lab_q + 0.1) / width,
            (legend_in + key_in + 0.05) / height,
            max(width - lab_q - lab_k - 0.2, 0.3) / width,
            span_h / height,
        )
    )
    ax.set_axis_off()
    ax.set_xlim(0, 1)
    ax.set_ylim(n - 0.5, -0.5)
    # centre the shorter column against the longer one
    yq = np.arange(nq) + (n - nq) / 2
    yk = np.arange(nk) + (n - nk) / 2
    fit = max(2, int(span_h / (fs * FIT * PT) + 1e-6) * max(nq, 1) // max(n, 1))
    x0, x1 = 0.02, 0.98
    q_shown = set(vm.tick_indices(nq, fit, q_only))
    k_shown = set(vm.tick_indices(nk, max(2, fit * max(nk, 1) // max(nq, 1))))
    for i, (lab, y) in enumerate(zip(q_labels, yq)):
        if i in q_shown:
            ax.text(
                x0 - 0.01,
                y,
                lab,
                ha="right",
                va="center",
                fontsize=fs,
                color="0.45" if q_special[i] else "black",
                fontweight="bold" if i == q_only else "normal",
            )
    for j, (lab, y) in enumerate(zip(k_labels, yk)):
        if j in k_shown:
            ax.text(x1 + 0.01, y, lab, ha="left", va="center", fontsize=fs, color="0.45" if k_special[j] else "black")
    # the view model's links (the screen draws the same set): strongest per row, above LINK_MIN of the cut's reference
    # rows closer than a label's pitch: lines as much thinner (at least a tenth), else 2,000 rows' lines, each at
    # least 0.2 pt on rows 0.5 pt apart, inked the page solid (a tiny causal model's one link a row included)
    thin = clamp(span_h / max(n, 1) / pitch, 0.1, 1.0)
    by_item: dict[int, tuple[list, list, list]] = {}
    n_items = len(items)
    for c, i, j, w in links:
        if q_only is not None and i != q_only:
            continue
        # overlaid heads sit side by side (a fraction of a row apart) instead of blending into one line
        dy = (c - (n_items - 1) / 2) * min(0.5 / n_items, 0.15)
        segs, cols_rgba, widths = by_item.setdefault(c, ([], [], []))
        colour = to_rgba(colours[c])
        segs.append(((x0, yq[i] + dy), (x1, yk[j] + dy)))
        cols_rgba.append((*colour[:3], vm.link_alpha(w)))
        widths.append((0.2 + 2.0 * w) * thin)
    for segs, cols_rgba, widths in by_item.values():
        ax.add_collection(LineCollection(segs, colors=cols_rgba, linewidths=widths, capstyle="round"))
    if len(items) > 1:
        handles = [Line2D([], [], color=colours[c], lw=1.5, label=name) for c, (name, _) in enumerate(items)]
        fig.legend(
            handles=handles,
            loc="lower center",
            bbox_to_anchor=(0.5, key_in / height),
            ncol=legend_cols,
            fontsize=fs,
            frameon=False,
            handlelength=1.5,
            columnspacing=1.0,
            borderaxespad=0.1,
        )
    # x in data, y in axes fraction, lifted clear of the first label: headers just above the columns
    above = offset_copy(ax.get_xaxis_transform(), fig=fig, y=fs * 0.75, units="points")
    ax.text(x0 - 0.01, 1.0, qt, ha="right", va="bottom", fontsize=fs, style="italic", transform=above, clip_on=False)
    ax.text(x1 + 0.01, 1.0, kt, ha="left", va="bottom", fontsize=fs, style="italic", transform=above, clip_on=False)
    fig.text(0.5, 0.03 / height, key, ha="center", va="bottom", fontsize=fs - 1, color="0.3", linespacing=LINE * 0.9)
    if title:
        fig.text(0.5, 1 - 0.04 / height, title, ha="center", va="top", fontsize=fs + 1)
    if note:  # what the page left out (fewer links a token) and how to see it: said by `figure` (figure_notes)
        NOTES.setdefault(fig, []).append(note)
    return fig


# ---------------------------------------------------------------------------------------------
# image overlay and strip


def _rgb(image) -> np.ndarray:
    """``[H, W, 3]`` uint8 from grey, RGBA or float [0, 1] images."""
    img = np.asarray(image)
    if img.ndim == 3 and img.shape[-1] == 1:
        img = img[..., 0]
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    if img.ndim != 3 or img.shape[-1] not in (3, 4):
        raise AttnvizError(f"the result's image has shape {img.shape}; expected height x width x 3")
    img = img[..., :3]
    if img.dtype != np.uint8:
        f = img.astype(np.float32)
        img = np.clip(f * 255.0 if f.max() <= 1.0 else f, 0, 255).round().astype(np.uint8)
    return img


def _overlay(ax, image: np.ndarray, ov: vm.OverlayView, cmap, panel: vm.OverlayPanel | None = None):
    """The view model's overlay (or its global-image ``panel``, on the overlay's scale and base): its image base
    (grey, colour or none) under the heat colours at its opacity."""
    drawn: vm.OverlayView | vm.OverlayPanel = panel or ov
    rgba = cmap(drawn.heat)
    rgba[..., 3] = drawn.alpha
    ih, iw = image.shape[:2]
    # raster output: the base and the heat as two layers resampled to the dpi (as ever); vector output: the same
    # composite at the image's own pixels (the heat is already the view model's smoothed map at those pixels),
    # one image pixel a photo pixel, scaled by the viewer without smoothing
    raster_only(ax.imshow(vm.base_rgb(image, ov.base), interpolation="auto"))
    heat = ax.imshow(rgba, interpolation="bilinear", extent=(-0.5, iw - 0.5, ih - 0.5, -0.5))
    photo_overlay(heat, vm.composite(image, rgba, drawn.alpha, ov.base))
    rect = drawn.query_rect(iw, ih)
    if rect is not None:  # the query patch, outlined as on screen (pixel edges sit half a pixel off the centres)
        x, y, w, h = rect
        ax.add_patch(Rectangle((x - 0.5, y - 0.5), w, h, fill=False, edgecolor=vm.QUERY_OUTLINE, linewidth=1.0))
    ax.set_axis_off()
    hs = ov.scale  # the colour scale in force: the bar's numbers are its weights (decades on the log scale)
    norm = LogNorm(hs.vmin, hs.vmax, clip=True) if hs.log else Normalize(hs.vmin, hs.vmax, clip=True)
    return ScalarMappable(norm=norm, cmap=cmap)


def _image_selection(sel: vm.Selection) -> vm.Selection:
    """Image regions draw the whole map of one query: no step cut, no hidden tokens, no kept mass (as on screen)."""
    return sel.with_(keep=1.0, hide_special=False)


IMAGES_A_ROW = 4  # several heads' pictures wrap after this many a row (a tiled image's heads: one a row)


def draw_image(result: AttentionResult, sel: vm.Selection, style: FigureStyle):
    spec = style
    image = _rgb(vm.pictured(result, sel.picture, sel.batch).image)  # the image chosen of a prompt's several
    # one map, or several heads side by side on one colour scale (the view model's pictures, captions and title)
    # sel.vmax (--vmax): the top of the one colour scale, as the token maps take it (the view model's scale)
    ho = vm.heads_overlay(result, _image_selection(sel), image.shape[:2])
    ov = ho.overlays[0]
    fs = float(spec.font_size)
    ih, iw = image.shape[:2]
    n = len(ho.pictures)
    per_head = n // len(ho.overlays)  # a tiled image's heads: one a row, its tiles beside its global image
    per_row = min(n, IMAGES_A_ROW) if per_head == 1 else per_head
    rows = math.ceil(n / per_row)
    width = spec.fixed_width or (3.0 if n == 1 else 5.0 if n == 2 else 7.16)
    title = fit_title(make_title(result, style, ho.title), width, fs + 1)
    title_in = title_height(title, fs + 1)
    # the heads', the tiles' and the global image's captions (a head's over a tiled image's: two lines)
    lines = max((c.count("\n") + 1 for c in ho.captions), default=0)
    cap_in = (0.6 + lines) * fs * LINE * PT if ho.captions else 0.0
    pad, cbar_gap, cbar_w, gap = 0.05, 0.08, 0.08, 0.1
    # room right of the bar for its tick labels (the top one is the scale's value, e.g. 0.0296) and its label
    ticks = [text for _, text in vm.scale_ticks(ov.scale.vmin, ov.scale.vmax, ov.scale.log)]
    # (two lines of label, unless a bar as short as a row of wide pictures wraps it into more: then room for those)
    label_lines, fitted = 2, 0
    while fitted != label_lines:
        fitted = label_lines
        cbar_lab = text_width_in(ticks, fs) + (label_lines + 0.2) * fs * LINE * PT + 0.06
        room = width - 2 * pad - cbar_gap - cbar_w - cbar_lab - gap * (per_row - 1)
        img_w = max(room / per_row, 0.3)
        img_h = img_w * ih / iw
        bar_h = rows * img_h + (rows - 1) * (cap_in + gap)
        # (narrower pictures make a shorter bar: more lines, never fewer, so this settles within the label's words)
        label_lines = max(fitted, wrap_label(ov.scale.label, bar_h, fs).count("\n") + 1)
    # the bar's lowest tick label is centred on its bottom end: past the default 7 pt its lower half ran off the page
    # (the "0" cut at --font-size 11); the margin below grows with the font
    low = pad + max(fs - 7.0, 0.0) * 1.3 * PT
    height = title_in + rows * (cap_in + img_h) + (rows - 1) * gap + pad + low
    fig = new_figure(spec, width, height, constrained=False)
    cmap = _cmap(style, "image")
    for k, (drawn, panel) in enumerate(ho.pictures):  # one colour scale: which head, which picture, looks shows
        r, c = divmod(k, per_row)
        x0 = pad + c * (img_w + gap)
        y0 = low + (rows - 1 - r) * (img_h + cap_in + gap)
        ax = fig.add_axes((x0 / width, y0 / height, img_w / width, img_h / height))
        sm = _overlay(ax, image, drawn, cmap, panel)
        if ho.captions:
            ax.set_title(ho.captions[k], fontsize=fs, pad=fs * 0.4)
    x_bar = pad + per_row * img_w + (per_row - 1) * gap + cbar_gap
    cax = fig.add_axes((x_bar / width, low / height, cbar_w / width, bar_h / height))
    # the overlay's colour scale (fixed, shared by the block's heads or stretched to the map, as on screen): the bar
    # says which in the screen's words
    _colorbar(fig, sm, ov.scale.log, fs, ov.scale.label, bar_h, cax=cax)
    if title:
        fig.text(0.5, 1 - 0.04 / height, title, ha="center", va="top", fontsize=fs + 1)
    return fig


def draw_strip(result: AttentionResult, sel: vm.Selection, style: FigureStyle):
    """Image models: the image, then one overlay per word.  Text models: the source (or the tokens so far) once
    per generated word, each token shaded by its weight.  The words, weights and title are the view model's
    (:func:`attnviz.core.view.strip_view`)."""
    sv = vm.strip_view(result, sel)
    if sv.image:
        return _image_strip(result, sel, style, sv)
    return _text_strip(result, sel, style, sv)


def _image_strip(result: AttentionResult, sel: vm.Selection, style: FigureStyle, sv: vm.StripView):
    spec = style
    # a panel per word: the words' attention over the image, whatever the image view was drawing
    # (each panel on its own stretched scale, or every panel on the top set by hand: vm.panel_selection)
    isel = vm.panel_selection(_image_selection(sel).with_(block=sv.block_index, image_from=vm.DEFAULT_IMAGE_FROM))
    rows = [(p.row, p.word) for p in sv.panels]
    image = _rgb(result.image)
    ih, iw = image.shape[:2]
    fs = float(spec.font_size)
    n = len(rows) + 1  # the input image first, as in Xu et al. (2015)
    width = spec.fixed_width or clamp(min(n, 6) * 1.15, 2.4, 7.16)
    nrows = math.ceil(n / max(1, min(n, int(width // 0.9))))
    ncols = math.ceil(n / nrows)  # balanced rows: 9 panels -> 5 + 4, not 7 + 2
    pw = width / ncols
    img_h = (pw - 0.08) * ih / iw
    word_in = fs * 2.2 * PT
    title = fit_title(make_title(result, style, sv.title), width, fs + 1)
    title_in = title_height(title, fs + 1)
    # the panels' one colour bar (as the text strip's) over its tick labels and its label, wrapped to the width
    bar_label = wrap_label(vm.image_strip_label(sel), 0.9 * width, fs - 1)
    bar_y = 0.05 + (bar_label.count("\n") + 1) * (fs - 1) * LINE * PT + (fs + 2) * PT
    cbar_in = bar_y + 0.07 + 0.12
    height = title_in + nrows * (img_h + word_in) + cbar_in + 0.05
    fig = new_figure(spec, width, height, constrained=False)
    cmap = _cmap(style, "strip")
    for k in range(n):
        r, c = divmod(k, ncols)
        x0 = c * pw + 0.04
        y0 = height - title_in - (r + 1) * (img_h + word_in) + word_in
        ax = fig.add_axes((x0 / width, y0 / height, (pw - 0.08) / width, img_h / height))
        ax.set_axis_off()
        if k == 0:  # the photo at its own pixels in a PDF or SVG
            as_vector_cells(ax.imshow(image, interpolation="auto"))
            word, weight = "(input)", "normal"
        else:
            row, _word = rows[k - 1]
            word, weight = _panel_name(sv.panels[k - 1]), "bold"
            # each panel on its own scale, as in Xu et al.: where does this word look?
            _overlay(ax, image, vm.overlay_view(result, isel.with_(query=row), image.shape[:2]), cmap)
        fig.text(
            (x0 + (pw - 0.08) / 2) / width,
            (y0 - 0.03) / height,
            word,
            ha="center",
            va="top",
            fontsize=fs + 1,
            fontweight=weight,
        )
    # without it the strip said nothing of its colours: each panel's brightest heat is that word's own maximum, or
    # (a top set by hand) the one scale's weights
    cax = fig.add_axes((0.25, bar_y / height, 0.5, 0.07 / height))
    top = sel.vmax or 1.0
    cb = fig.colorbar(ScalarMappable(norm=Normalize(0.0, top), cmap=cmap), cax=cax, orientation="horizontal")
    ticks = vm.scale_ticks(0.0, top, False) if sel.vmax else [(0.0, "0"), (1.0, "max")]
    cb.set_ticks([t for t, _ in ticks], labels=[text for _, text in ticks])
    cb.ax.tick_params(labelsize=fs - 1, length=2, width=0.5, pad=1)
    cb.outline.set_linewidth(0.5)
    cb.set_label(bar_label, fontsize=fs - 1, labelpad=1)
    if title:
        fig.text(0.5, 1 - 0.04 / height, title, ha="center", va="top", fontsize=fs + 1)
    return fig


def _panel_name(panel: vm.StripPanel) -> str:
    """A strip panel's caption as the window's query buttons name it ("a (5)" where a word is written twice; the
    name is cleaned already, so a long word keeps its place), ``$`` escaped for matplotlib."""
    return panel.name.replace("$", r"\$") if panel.name else display_label(panel.word)


def _text_strip(result: AttentionResult, sel: vm.Selection, style: FigureStyle, sv: vm.StripView):
    spec = style
    fs = float(spec.font_size)
    panels = [(_panel_name(p), display_labels(p.k_labels), p.k_special, p.weights) for p in sv.panels]
    norm = _norm(style, sel.log, sv.vmax)
    # light-to-dark for shading text: unattended tokens stay on a near-white background
    cmap = _cmap(style if style.cmap else replace(style, cmap="magma_r"), "strip")
    width = spec.fixed_width or 3.5
    pad_pt, gap_pt, line_pt = 1.6, 1.5, fs * 1.75
    avail_pt = (width - 0.2) * 72
    # lay every panel's tokens out in lines (wrapping at the figure width)
    layouts = []
    for word, labels, specials, w in panels:
        x, y, boxes = 0.0, 0, []
        for lab, sp, wt in zip(labels, specials, w):
            tw = text_width_pt(lab, fs) + 2 * pad_pt
            if x > 0 and x + tw > avail_pt:
                x, y = 0.0, y + 1
            boxes.append((x, y, tw, lab, float(wt), sp))
            x += tw + gap_pt
        # centre each line under the figure's width
        for line in range(y + 1):
            mine = [b for b in boxes if b[1] == line]
            shift = (avail_pt - (mine[-1][0] + mine[-1][2])) / 2
            boxes = [(b[0] + shift, *b[1:]) if b[1] == line else b for b in boxes]
        layouts.append((word, boxes, y + 1))
    word_pt = fs * 2.0
    title = fit_title(make_title(result, style, sv.title), width, fs + 1)
    title_in = title_height(title, fs + 1)
    # the bar's tick labels and its label lie under it, at fs - 1 points: 0.24 in at the default 7 pt, grown with the
    # font (a fixed 0.24 in cut the label off the page's bottom at --font-size 9 and up)
    bar_y = 0.24 * max(fs - 1, 6) / 6
    cbar_in = bar_y + 0.18
    body_pt = sum(n_lines * line_pt + word_pt + 4 for _, _, n_lines in layouts)
    height = title_in + body_pt / 72 + cbar_in + 0.05
    fig = new_figure(spec, width, height, constrained=False)
    ax = fig.add_axes((0.1 / width, (cbar_in + 0.02) / height, (width - 0.2) / width, (body_pt / 72) / height))
    ax.set_xlim(0, avail_pt)
    ax.set_ylim(body_pt, 0)
    ax.set_axis_off()
    y0 = 0.0
    for word, boxes, n_lines in layouts:
        for x, line, tw, lab, wt, special in boxes:
            top = y0 + line * line_pt
            face = cmap(norm(max(wt, 1e-12) if sel.log else wt))
            ax.add_patch(Rectangle((x, top + 0.8), tw, line_pt - 1.6, facecolor=face, edgecolor="none"))
            lum = 0.299 * face[0] + 0.587 * face[1] + 0.114 * face[2]
            ax.text(
                x + tw / 2,
                top + line_pt / 2,
                lab,
                ha="center",
                va="center_baseline",
                fontsize=fs,
                color=("0.85" if special else "white") if lum < 0.5 else ("0.35" if special else "black"),
            )
        y0 += n_lines * line_pt
        ax.text(
            avail_pt / 2,
            y0 + word_pt * 0.55,
            word,
            ha="center",
            va="center_baseline",
            fontsize=fs + 1,
            fontweight="bold",
        )
        y0 += word_pt + 4
    cax = fig.add_axes((0.25, bar_y / height, 0.5, 0.07 / height))
    cb = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), cax=cax, orientation="horizontal")
    cb.ax.tick_params(labelsize=fs - 1, length=2, width=0.5, pad=1)
    cb.outline.set_linewidth(0.5)
    cb.set_label(vm.notes_label(sv.notes, sel.log, sv.scale, sel.vmax), fontsize=fs - 1, labelpad=1)
    if title:
        fig.text(0.5, 1 - 0.04 / height, title, ha="center", va="top", fontsize=fs + 1)
    return fig


# view name -> (draw(result, selection, style) -> Figure, why_not(result) -> str | None)
VIEW_DRAWERS = {
    "heatmap": (draw_heatmap, sel_.WHY_NOT["heatmap"]),
    "overview": (draw_overview, sel_.WHY_NOT["overview"]),
    "links": (draw_links, sel_.WHY_NOT["links"]),
    "alignment": (draw_alignment, sel_.WHY_NOT["alignment"]),
    "image": (draw_image, sel_.WHY_NOT["image"]),
    "audio": (draw_audio, sel_.WHY_NOT["audio"]),
    "strip": (draw_strip, sel_.WHY_NOT["strip"]),
}
