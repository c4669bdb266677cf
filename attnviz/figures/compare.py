"""Two models' maps of one head side by side: A | B | A − B (``attnviz compare ... --figure OUT``).

Each panel is what the window's Head map draws for the same selection while a comparison is held (its "A", "B"
and "A − B"): the view model's :func:`~attnviz.core.view.head_map`, :func:`~attnviz.core.view.compute_other_map`
and :func:`~attnviz.core.view.compute_diff_map` give the matrices, labels, titles and colour ranges; this module
only lays the three out in one figure, each with its own colour bar (A − B on the diverging map, symmetric about 0).
"""

from __future__ import annotations

from matplotlib import colormaps
from matplotlib.colors import Normalize

from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult
from attnviz.figures.cells import as_cells
from attnviz.figures.layout import (
    LINE,
    PT,
    clamp,
    display_labels,
    fit_title,
    make_title,
    model_name,
    new_figure,
    text_width_in,
    title_height,
    token_ticks,
)
from attnviz.figures.spec import FigureStyle
from attnviz.figures.views import CBAR_IN, _cmap, _colorbar, _norm

PANELS = ("A", "B", "A − B")


def compare_maps(result_a: AttentionResult, result_b: AttentionResult, sel: vm.Selection) -> list[vm.MapView]:
    """The three panels' maps: what Head map shows as "A", "B" and "A − B" for ``sel`` (a selection on A)."""
    return [
        vm.head_map(result_a, sel),  # the Head map's (a tower's frames: one frame)
        vm.compute_other_map(result_a, result_b, sel),
        vm.compute_diff_map(result_a, result_b, sel),
    ]


def draw_compare(result_a: AttentionResult, result_b: AttentionResult, sel: vm.Selection, style: FigureStyle):
    maps = compare_maps(result_a, result_b, sel)
    fs = float(style.font_size)
    nq, nk = maps[0].matrix.shape
    q_labels, k_labels = display_labels(maps[0].q_labels), display_labels(maps[0].k_labels)
    pitch = fs * LINE * PT
    ylab_in = text_width_in(q_labels, fs) + 0.3
    xlab_in = text_width_in(k_labels, fs) + 0.3
    gap = CBAR_IN + 0.45  # each panel's colour bar, its words and the space after them (the wspace below)
    width = style.fixed_width or clamp(ylab_in + 3 * (clamp(nk * pitch, 1.2, 4.5) + gap), 4.0, 16.0)
    panel_w = max((width - ylab_in - 3 * gap) / 3, 0.3)
    title = fit_title(
        make_title(result_a, style, maps[0].title, f"A = {model_name(result_a)}, B = {model_name(result_b)}"),
        width,
        fs + 1,
    )
    map_h = clamp(nq * min(panel_w / nk, max(pitch, panel_w / nk)), 0.8, 8.0)
    height = title_height(title, fs + 1) + fs * 2 * PT + xlab_in + map_h + 0.15
    # a wider gap between panels than one map's: each colour bar's words ("attention weight (fixed 0–1)") sat
    # against the next panel's map and read as that panel's axis title
    fig = new_figure(style, width, height, wspace=0.12)
    axes = fig.subplots(1, 3, sharey=True)
    for i, (ax, mv, name) in enumerate(zip(axes, maps, PANELS)):
        log = sel.log and not mv.diverging
        if mv.diverging:
            cmap, norm = colormaps[vm.DIFF_CMAP], Normalize(mv.vmin, mv.vmax)
        else:
            cmap, norm = _cmap(style, "heatmap"), _norm(style, log, mv.vmax)
        im = as_cells(ax.imshow(vm.drawn_cells(mv), cmap=cmap, norm=norm, aspect="auto", interpolation="nearest"))
        token_ticks(ax, "x", display_labels(mv.k_labels), mv.k_special, panel_w, fs, positions=mv.k_pos)
        token_ticks(ax, "y", display_labels(mv.q_labels), mv.q_special, map_h, fs, positions=mv.q_pos)
        ax.tick_params(which="major", labelleft=i == 0)
        ax.set_xlabel(mv.x_title, fontsize=fs, labelpad=2)
        if i == 0:
            ax.set_ylabel(mv.y_title, fontsize=fs, labelpad=2)
        ax.set_title(name, fontsize=fs + 1)
        for s in ax.spines.values():
            s.set_linewidth(0.5)
        _colorbar(fig, im, log, fs, vm.map_label(mv, log), map_h, ax=ax, fraction=0.1, pad=0.03, aspect=20)
    if title:
        fig.suptitle(title, fontsize=fs + 1)
    return fig
