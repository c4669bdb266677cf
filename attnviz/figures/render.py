"""The one figure renderer behind ``attnviz figure`` and the GUI's Export menu.

Figures are plain :class:`matplotlib.figure.Figure` objects on an Agg canvas (no pyplot state,
no GUI toolkit).  Text stays text: TrueType fonts are embedded as Type 42 in PDF/PS and SVG
keeps ``<text>`` elements, so the tokens in a figure can be searched and copied.
Output is reproducible byte for byte: no dates or tool versions are written into the files.
"""

from __future__ import annotations

import io
import os
import threading
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import matplotlib as mpl
from matplotlib import font_manager
from matplotlib.figure import Figure
from matplotlib.typing import RcKeyType

from attnviz import AttnvizError, __version__
from attnviz.core import limits
from attnviz.core.attention import AttentionResult
from attnviz.core.rows import beam_rows, pick_row, scored_rows
from attnviz.core.setting_words import name as setting_name
from attnviz.core.view import Selection
from attnviz.core.writes import atomic_write_bytes
from attnviz.figures import glyphs
from attnviz.figures.spec import FORMATS, VIEWS, FigureSpec, FigureStyle
from attnviz.figures.views import VIEW_DRAWERS

# fonts tried after DejaVu Sans for glyphs it lacks (CJK...), where installed; matplotlib falls back per glyph
FALLBACK_FONTS = (
    "Noto Sans CJK JP",
    "Noto Sans CJK SC",
    "Noto Sans CJK KR",
    "Source Han Sans",
    "WenQuanYi Zen Hei",
    "Droid Sans Fallback",
    "Noto Sans",
    "Noto Sans Arabic",
    "Noto Sans Hebrew",
    "Noto Sans Devanagari",
    "Microsoft YaHei",
    "PingFang SC",
    "Hiragino Sans",
    "Arial Unicode MS",
)


# matplotlib's own warning, one a missing glyph and naming its source line: the figure command says it once instead,
# with the characters and the fix (glyph_note)
warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font", category=UserWarning)


def glyph_note(fig: Figure) -> str | None:
    """One line naming the characters of ``fig``'s text that no font it draws with has (printed as boxes), or None."""
    return glyphs.glyph_note(fig, tuple(RC["font.sans-serif"]))


def _installed(names) -> list[str]:
    have = {f.name for f in font_manager.fontManager.ttflist}
    return [n for n in names if n in have]


# style and output settings applied while drawing and while saving (never changed globally)
RC: dict[RcKeyType, Any] = {
    "font.family": "sans-serif",
    # DejaVu Sans ships with matplotlib: same metrics everywhere, wide Unicode coverage
    "font.sans-serif": ["DejaVu Sans", *_installed(FALLBACK_FONTS)],
    "font.size": 7.0,
    "axes.linewidth": 0.5,
    "axes.titlepad": 3.0,
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    "savefig.edgecolor": "white",
    "savefig.transparent": False,
    "savefig.bbox": None,  # keep the asked size: PNG pixels = width_in * dpi
    "savefig.dpi": "figure",
    "text.usetex": False,
    "pdf.fonttype": 42,  # embed TrueType (subset) fonts: text stays searchable and editable
    "ps.fonttype": 42,
    "svg.fonttype": "none",  # SVG keeps <text> elements
    "svg.hashsalt": "attnviz",  # stable clip-path ids -> byte-identical SVG
    "svg.image_inline": True,
    "image.resample": True,
}

# per-format metadata: drop dates and versions so the same figure gives the same bytes
_METADATA: dict[str, dict] = {
    "png": {"Software": None},
    "pdf": {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": f"attnviz {__version__}"},
    "svg": {"Date": None, "Creator": f"attnviz {__version__}"},
}


# rc_context swaps matplotlib's global rcParams: one figure is drawn or saved at a time (GUI worker threads)
_LOCK = threading.RLock()


@contextmanager
def style():
    """The rc settings figures are drawn and saved with (a context; global rcParams are restored after)."""
    with _LOCK, mpl.rc_context(RC):
        yield


def why_not(result: AttentionResult, view: str) -> str | None:
    """None when ``view`` can be drawn for ``result``; otherwise a one-line reason."""
    if view not in VIEW_DRAWERS:
        return f"unknown view {view!r}; use one of {', '.join(VIEWS)}"
    return VIEW_DRAWERS[view][1](result)


def applicable_views(result: AttentionResult) -> dict[str, str | None]:
    """``{view: None | reason}`` for every view, in menu order (for the GUI's Export menu)."""
    return {v: why_not(result, v) for v in VIEWS}


def render_figure(
    result: AttentionResult, view: str, selection: Selection, figure_style: FigureStyle | None = None
) -> Figure:
    """Draw ``view`` of ``result`` for the view model's ``selection`` (the window's own, or one
    :func:`attnviz.figures.select.resolve` built from the command line) in ``figure_style``; raises
    :class:`AttnvizError` for anything the user can fix."""
    if not isinstance(selection, Selection):
        raise TypeError("selection must be an attnviz.core.view.Selection")
    if view not in VIEW_DRAWERS:
        raise AttnvizError(f"unknown view {view!r}; use one of {', '.join(VIEWS)}", param="view")
    st = figure_style or FigureStyle()
    if not result.maps:
        raise AttnvizError("this result holds no attention maps; nothing to draw")
    draw, why = VIEW_DRAWERS[view]
    reason = why(result)
    if reason:
        raise AttnvizError(reason, param="view")
    drawn, drawn_sel = result, selection
    if beam_rows(result) is not None or scored_rows(result):
        # the window exports a beam search's result whole with the beam in its selection: draw that beam alone,
        # as `figure --batch-index` does, so its title names the beam and its score (not the output's own); a dual
        # encoder's row likewise names its text (or image) and score
        drawn, drawn_sel = pick_row(result, selection.batch), selection.with_(batch=0)
    with style():
        fig = draw(drawn, drawn_sel, st)
    fig.set_dpi(st.dpi)
    # what it was drawn from, for callers that want it back (the tests compare it with the screen's)
    fig.attnviz_view, fig.attnviz_selection, fig.attnviz_style = view, selection, st
    return fig


def render_diff_figure(
    result_a: AttentionResult,
    result_b: AttentionResult,
    selection: Selection,
    figure_style: FigureStyle | None = None,
) -> Figure:
    """Head map's "A − B" of two models' results on one input (the window's File ▸ Compare with…): A's map of
    ``selection`` minus B's, on a diverging colour map with symmetric limits ±max |A − B|."""
    from attnviz.figures.views import draw_diff

    if not isinstance(selection, Selection):
        raise TypeError("selection must be an attnviz.core.view.Selection")
    st = figure_style or FigureStyle()
    with style():
        fig = draw_diff(result_a, result_b, selection, st)
    fig.set_dpi(st.dpi)
    fig.attnviz_view, fig.attnviz_selection, fig.attnviz_style = "heatmap", selection, st
    return fig


def render_compare_figure(
    result_a: AttentionResult,
    result_b: AttentionResult,
    selection: Selection,
    figure_style: FigureStyle | None = None,
) -> Figure:
    """A | B | A − B of ``selection`` (a selection on A) side by side: the three maps the window's Head map shows
    while a comparison is held (``attnviz compare ... --figure``)."""
    from attnviz.figures.compare import draw_compare

    if not isinstance(selection, Selection):
        raise TypeError("selection must be an attnviz.core.view.Selection")
    st = figure_style or FigureStyle()
    with style():
        fig = draw_compare(result_a, result_b, selection, st)
    fig.set_dpi(st.dpi)
    fig.attnviz_view, fig.attnviz_selection, fig.attnviz_style = "heatmap", selection, st
    return fig


def render_spec(result: AttentionResult, spec: FigureSpec) -> Figure:
    """Draw a command line's or a recipe's :class:`FigureSpec`: resolved once into the view model's selection."""
    from attnviz.figures.select import resolve

    spec.validate()
    return render_figure(result, spec.view, resolve(result, spec), spec.style)


def figure_format(path: str | os.PathLike) -> str:
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FORMATS and Path(path).is_dir():  # "no suffix" sent the user to rename a folder
        raise AttnvizError(
            f"{path} is a folder; give a file in it (e.g. {Path(path) / 'figure.pdf'}), or --all-heads to write one "
            "figure a head into it"
        )
    if suffix not in FORMATS:
        shown = f"'.{suffix}'" if suffix else "no suffix"
        raise AttnvizError(
            f"cannot tell the figure format of {Path(path).name} ({shown}); end the file name in .pdf, .svg or .png"
        )
    return suffix


def figure_bytes(fig: Figure, fmt: str = "png", dpi: float | None = None) -> bytes:
    """The encoded figure (pdf|svg|png) in memory, e.g. for a clipboard or a preview."""
    if fmt not in FORMATS:
        raise AttnvizError(f"unknown figure format {fmt!r}; use one of {', '.join(FORMATS)}")
    buf = io.BytesIO()
    with style():
        if fmt == "pdf":  # a map's cells embedded a pixel a cell, scaled by the viewer without smoothing
            # (imported here: matplotlib's PDF backend, ~10 MB of modules that a PNG does not need)
            from attnviz.figures.pdf_out import crisp_pages

            with crisp_pages(buf, _METADATA[fmt]) as pages:
                pages.savefig(fig, dpi=dpi or fig.dpi)
        else:
            fig.savefig(buf, format=fmt, dpi=dpi or fig.dpi, metadata=_METADATA[fmt])
    if fmt == "svg":
        from attnviz.figures.svg_out import crisp_svg

        return crisp_svg(buf.getvalue())
    return buf.getvalue()


def save_figure(fig: Figure, path: str | os.PathLike, dpi: float | None = None, flag: str | None = None) -> Path:
    """Write ``fig`` to ``path`` (format from the suffix) atomically: temp file in the same folder + rename.

    A failed write never leaves a half-written file or touches an existing one.  ``flag``: the option that named
    ``path``, for the messages (``compare --figure``; by default ``--out``, and no flag in the window's export).
    """
    flag = setting_name("output") if flag is None else flag
    return atomic_write_bytes(path, encoded_figure(fig, path, dpi, flag), flag)


def save_figure_and_recipe(
    fig: Figure, path: str | os.PathLike, recipe: dict, recipe_path: str | os.PathLike, dpi: float | None = None
) -> Path:
    """``fig`` to ``path`` and its ``recipe`` to ``recipe_path``, written together (core/writes.py's
    :func:`~attnviz.core.writes.atomic_write_files`): one after the other, a Ctrl-C or a failed recipe write between
    them left the new figure beside the old recipe, whose ``figure --recipe`` then drew the old figure."""
    from attnviz.core.writes import atomic_write_files
    from attnviz.figures.recipe import RECIPE_FLAG, recipe_bytes

    data = encoded_figure(fig, path, dpi)
    atomic_write_files(
        [(path, data, setting_name("output")), (recipe_path, recipe_bytes(recipe, recipe_path), RECIPE_FLAG)]
    )
    return Path(path)


def encoded_figure(fig: Figure, path: str | os.PathLike, dpi: float | None = None, flag: str | None = None) -> bytes:
    """``fig`` encoded in the format ``path``'s suffix names, once ``path`` is checked to be writable there (not a
    folder, in one that exists) and a PNG's size within the limit: the bytes :func:`save_figure` writes."""
    flag = setting_name("output") if flag is None else flag  # "--out"; "" in the window, whose dialog chose the file
    path = Path(path)
    fmt = figure_format(path)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise AttnvizError(f"cannot write {path}: it is a folder; give a file name ending in .{fmt}")
    if not parent.is_dir():
        raise AttnvizError(
            f"cannot write {path}: folder {parent} does not exist; create it or choose another {flag or 'folder'}"
        )
    if fmt == "png":  # a raster's memory grows with (inches × dpi)²: estimate before drawing
        w, h = fig.get_size_inches() * float(dpi or fig.dpi)
        limits.check("figure_pixels", w * h, f"the figure {path.name} ({w:.0f}×{h:.0f} px)")
    return figure_bytes(fig, fmt, dpi)


def export_figure(
    result: AttentionResult, path: str | os.PathLike, spec: FigureSpec, recipe_sources: dict | None = None
) -> Path:
    """Render, save atomically and (given ``recipe_sources``) write ``PATH.recipe.json`` beside it.

    ``recipe_sources``: the :func:`attnviz.figures.recipe.make_recipe` keywords saying where the result came from,
    e.g. ``{"model": "m.onnx", "text": "the cat sat", "generate": 0}`` or ``{"maps": "maps.npz"}``.
    """
    from attnviz.figures.recipe import make_recipe, recipe_path_for

    figure_format(path)
    fig = render_spec(result, spec)
    if recipe_sources is None:
        return save_figure(fig, path)
    out = Path(path)
    return save_figure_and_recipe(fig, out, make_recipe(spec, output=out, **recipe_sources), recipe_path_for(out))
