"""Shared drawing helpers: label text, tick thinning, figure sizing, titles, new Agg figures."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.lines import Line2D
from matplotlib.markers import TICKDOWN, TICKLEFT, MarkerStyle

from attnviz.core.attention import AttentionResult
from attnviz.core.rows import score_text
from attnviz.core.view import clean_label, frame_step, tick_indices, tick_texts, time_tick_indices
from attnviz.figures.spec import FigureStyle

LINE = 1.4  # label pitch in font sizes used when a figure is sized to its labels
FIT = 1.15  # the closest pitch (in font sizes) at which neighbouring labels still read apart
CHAR_W = 0.6  # average glyph width in font sizes (DejaVu Sans)
PT = 1 / 72  # inches per point
TOKEN_TICK = dict(length=2, width=0.5, pad=1.5)  # a token axis's ticks (points)
MINOR_PITCH = 1.0  # points: unlabelled positions get a small tick each where they lie at least this far apart


def display_label(tok: str) -> str:
    """Token text as the view model cleans it (:func:`attnviz.core.view.clean_label`), with ``$`` escaped so
    matplotlib never reads mathtext."""
    return clean_label(tok).replace("$", r"\$")


def display_labels(labels) -> list[str]:
    return [display_label(t) for t in labels]


@functools.lru_cache(maxsize=8192)
def _advance_pt(s: str, fs: float, family: str) -> float:
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    w, _, _ = TextToPath().get_text_width_height_descent(s, FontProperties(family=family, size=fs), ismath=False)
    return float(w)


def text_width_pt(s: str, fs: float) -> float:
    """Advance width of ``s`` at ``fs`` points in the current figure font (exact, no renderer needed)."""
    import matplotlib as mpl

    return _advance_pt(s.replace("\\$", "$"), float(fs), str(mpl.rcParams["font.sans-serif"][0]))


MEASURED_LABELS = 4096  # the most labels measured for a width (each distinct one costs ~0.5 ms of font work)


def text_width_in(labels: list[str], fs: float) -> float:
    """Width in inches of the widest label at ``fs`` points; of a long axis's the longest ``MEASURED_LABELS`` by
    characters (30,000 distinct labels took 15 s to measure, and the width only sizes the page: the layout
    engine makes room for the labels actually drawn)."""
    distinct = set(labels)
    if len(distinct) > MEASURED_LABELS:
        distinct = set(sorted(distinct, key=lambda s: (len(s), s))[-MEASURED_LABELS:])  # (ties: the same each run)
    return max((text_width_pt(s, fs) for s in distinct), default=fs * CHAR_W) * PT


def time_label_in(labels: list[str], fs: float) -> float:
    """Inches a level time label takes along its axis, two glyphs' gap to the next included (the widest: a CTC
    head's frame names its letter, "1.20 s </s>")."""
    return text_width_in(labels, fs) + 2 * CHAR_W * fs * PT


def token_ticks(
    ax,
    which: str,
    labels: list[str],
    special: list[bool] | None,
    length_in: float,
    fs: float,
    rotation=90,
    focus: int | None = None,
    positions=None,
):
    """Real-text tick labels along ``which`` ('x'|'y'); when they would overlap, the view model's rule
    (:func:`attnviz.core.view.tick_indices`: first, last, an even stride, the focused token; an audio encoder's
    frames at round times, :func:`attnviz.core.view.time_tick_indices`).  ``positions``: each label's position
    in the map; a thinned token axis's labels say theirs (:func:`attnviz.core.view.tick_texts`: "the ·1023"),
    a time axis's labels are already where they sit."""
    n = len(labels)
    fit = max(2, int(length_in / (fs * FIT * PT) + 1e-6))
    step = frame_step(labels)  # an audio encoder's frames: ticks at round times (0.5 s, 1 s, 5 s by the span)
    if step is not None and which == "x" and rotation == 0:  # times read level: as many as fit side by side
        fit = max(2, int(length_in / time_label_in(labels, fs) + 1e-6))
    pos = tick_indices(n, fit, focus) if step is None else time_tick_indices(0, n - 1, step, fit, focus)
    texts = tick_texts(labels, positions if step is None else None, pos, n)
    axis = ax.xaxis if which == "x" else ax.yaxis
    # the ticks' look set once, before they exist: matplotlib makes each new tick from these settings, where set
    # after it re-applied them to every tick (a tick is five artists; a 64-patch axis drew 64)
    axis.set_tick_params(which="major", **TOKEN_TICK, labelsize=fs, labelrotation=rotation if which == "x" else 0)
    axis.set_ticks(pos)
    tl = axis.set_ticklabels(texts)
    if which == "x" and rotation not in (0, 90):
        for t in tl:
            t.set_rotation_mode("anchor")
    if special is not None:
        for t, i in zip(tl, pos):
            if special[i]:
                t.set_color("0.45")
    if len(pos) < n and length_in / n >= MINOR_PITCH * PT:
        # unlabelled positions still get small ticks so the scale reads correctly (closer than MINOR_PITCH they
        # would print as one grey band)
        minor_ticks(ax, which, sorted(set(range(n)) - set(pos)))
    return pos


def minor_ticks(ax, which: str, positions: list[int]) -> Line2D:
    """A 1 pt tick, 0.3 pt wide, below (x) or left of (y) the axes at each of ``positions``: one line of tick
    markers, gid ``minor-ticks-x`` / ``-y``.  Not matplotlib's minor ticks: each of those is an object of its own
    (a line and an empty label), and a 1,000-token map's 2,000 took 13 s of its figure's 19 to make and draw."""
    at = np.asarray(positions, dtype=float)
    zeros = np.zeros_like(at)
    if which == "x":
        line = Line2D(at, zeros, transform=ax.get_xaxis_transform(), marker=MarkerStyle(TICKDOWN))
    else:
        line = Line2D(zeros, at, transform=ax.get_yaxis_transform(), marker=MarkerStyle(TICKLEFT))
    line.set(linestyle="none", markersize=1.0, markeredgewidth=0.3, color="black", clip_on=False)
    line.set_gid(f"minor-ticks-{which}")
    ax.add_artist(line)  # not add_line: the ticks lie outside the data and must not move its limits
    return line


def wrap_label(text: str, length_in: float, fs: float) -> str:
    """Break ``text`` at spaces into lines no longer than ``length_in`` (a colour-bar label never runs off the page)."""
    # a parenthesised remark stays whole where it fits: "attention weight" / "(log scale)"
    words: list[str] = []
    for chunk in re.split(r" (?=\()", text):
        fits = text_width_pt(chunk, fs) * PT <= length_in
        words.extend([chunk] if fits else chunk.split(" "))
    return "\n".join(_fill_lines(words, " ", lambda line: text_width_pt(line, fs) * PT <= length_in))


def _fill_lines(pieces: Iterable[str], joiner: str, fits: Callable[[str], bool]) -> list[str]:
    """Greedy filling: each line takes pieces while it still ``fits`` (a piece too long alone gets a line)."""
    lines, cur = [], ""
    for piece in pieces:
        cand = f"{cur}{joiner}{piece}" if cur else piece
        if cur and not fits(cand):
            lines.append(cur)
            cur = piece
        else:
            cur = cand
    lines.append(cur)
    return lines


def colormap_for(style: FigureStyle, view: str):
    """The matplotlib colour map a view draws in (the style's, else the view model's); one line for a bad name."""
    from matplotlib import colormaps

    from attnviz import AttnvizError

    name = style.colormap(view)
    if name not in colormaps:
        close = [c for c in sorted(colormaps) if c.lower().startswith(name.lower()[:3])][:6]
        hint = f" (close: {', '.join(close)})" if close else ""
        raise AttnvizError(
            f"unknown colormap {name!r}{hint}; try viridis, cividis, magma or any matplotlib colormap name"
        )
    return colormaps[name]


def new_figure(
    spec: FigureStyle, width: float, height: float, constrained: bool = True, wspace: float = 0.02
) -> Figure:
    """``wspace``: the constrained layout's gap between panels, a fraction of the figure's width."""
    # whole pixels at the asked dpi, so a PNG is exactly round(width_in * dpi) wide
    width = max(1, round(width * spec.dpi)) / spec.dpi
    height = max(1, round(height * spec.dpi)) / spec.dpi
    engine = ConstrainedLayoutEngine(w_pad=2 * PT, h_pad=2 * PT, wspace=wspace, hspace=0.02) if constrained else None
    fig = Figure(figsize=(width, height), dpi=spec.dpi, layout=engine)
    FigureCanvasAgg(fig)
    return fig


def model_name(result: AttentionResult) -> str:
    info = result.info or {}
    name = info.get("model_name") or info.get("name") or info.get("model") or ""
    name = str(name)
    if name.endswith(".onnx") or os.sep in name:
        name = os.path.splitext(os.path.basename(name))[0]
    return name


def beam_part(result: AttentionResult) -> str:
    """``beam 2 (score -0.541)`` for one hypothesis of a beam search (a figure of beam 2 must not pass for the
    output's own attention); "" otherwise."""
    info = result.info or {}
    score = info.get("beam_score")
    if not isinstance(score, (int, float)) or isinstance(score, bool):
        return ""
    return f"beam {int(info.get('batch_row', 0))} (score {score_text(score)})"


def pair_part(result: AttentionResult) -> str:
    """``text 1 “a dog” · score 0.542`` for one row of a dual encoder's scored rows (picked: ``batch_row``), so a
    figure of one candidate's maps says which; "" otherwise."""
    from attnviz.core.text_scores import TextScores

    info = result.info or {}
    scores, row = TextScores.from_info(info), info.get("batch_row")
    if scores is None or not isinstance(row, int) or not 0 <= row < len(scores.scores) or len(scores.scores) < 2:
        return ""
    if scores.images is None and not isinstance(info.get("texts"), list):  # raw feeds' rows: no typed texts
        return ""
    return " · ".join(scores.title_parts(row))


def make_title(result: AttentionResult, spec: FigureStyle, *parts: str) -> str:
    """``spec.title`` if given; else ``model · [beam b · | text t ·] part · part``."""
    if spec.title is not None:
        return spec.title.replace("$", r"\$")
    bits = [p for p in (model_name(result), beam_part(result), pair_part(result), *parts) if p]
    return " · ".join(bits).replace("$", r"\$")


def fit_title(title: str, width_in: float, fs: float) -> str:
    """Wrap a title at its `` · `` separators so each line fits the figure width."""
    if not title:
        return title
    limit = 0.94 * width_in / (fs * CHAR_W * PT)  # characters per line
    lines: list[str] = []
    for para in title.split("\n"):
        lines += _fill_lines(para.split(" · "), " · ", lambda line: len(line) <= limit)
    return "\n".join(lines)


def title_height(title: str, fs: float) -> float:
    """Inches taken by a (possibly multi-line) title at ``fs`` points, with its padding."""
    if not title:
        return 0.05
    return (title.count("\n") + 1) * fs * 1.25 * PT + 0.08


def clamp(v: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, v))
