"""Shared drawing helpers: label text, tick thinning, figure sizing, titles, new Agg figures."""

from __future__ import annotations

import math
import os

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attnviz.core.attention import AttentionResult
from attnviz.figures.spec import FigureSpec

MAX_LABEL_CHARS = 18
LINE = 1.4  # label pitch in font sizes used when a figure is sized to its labels
FIT = 1.15  # the closest pitch (in font sizes) at which neighbouring labels still read apart
CHAR_W = 0.6  # average glyph width in font sizes (DejaVu Sans)
PT = 1 / 72  # inches per point


def display_label(tok: str) -> str:
    """Token text as it should appear in print.

    Drops the byte-level/SentencePiece word markers (``Ġ``, ``▁``), shows whitespace and newline
    tokens visibly, shortens very long tokens and escapes ``$`` so matplotlib never reads mathtext.
    """
    s = str(tok)
    s = s.replace("Ċ", "\n").replace("ĉ", "\t")
    if s[:1] in ("Ġ", "▁"):
        s = s[1:]
    s = s.replace("\n", "↵").replace("\t", "⇥").replace("\r", "")
    if not s.strip():
        s = "␣"
    if len(s) > MAX_LABEL_CHARS:
        s = s[: MAX_LABEL_CHARS - 1] + "…"
    return s.replace("$", r"\$")


def display_labels(labels) -> list[str]:
    return [display_label(t) for t in labels]


def text_width_in(labels: list[str], fs: float) -> float:
    """Estimated width in inches of the longest label at ``fs`` points."""
    n = max((len(s.replace("\\$", "$")) for s in labels), default=1)
    return n * fs * CHAR_W * PT


def label_step(n: int, length_in: float, fs: float) -> int:
    """Show every k-th label so that labels along ``length_in`` inches stay ``fs * LINE`` apart."""
    fit = max(1, int(length_in / (fs * FIT * PT) + 1e-6))
    return max(1, math.ceil(n / fit))


def nice_step(k: int) -> int:
    """Round a thinning step up to 1, 2, 5, 10, 20, 50... so the labelled positions are easy to read."""
    if k <= 1:
        return 1
    mag = 10 ** int(math.floor(math.log10(k)))
    for m in (1, 2, 5, 10):
        if k <= m * mag:
            return m * mag
    return 10 * mag


def token_ticks(ax, which: str, labels: list[str], special: list[bool] | None, length_in: float, fs: float, rotation=90):
    """Real-text tick labels along ``which`` ('x'|'y'), thinned to every k-th when they would overlap."""
    n = len(labels)
    step = nice_step(label_step(n, length_in, fs))
    pos = list(range(0, n, step))
    texts = [labels[i] for i in pos]
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_ticks(pos)
    tl = axis.set_ticklabels(texts, fontsize=fs, rotation=rotation if which == "x" else 0)
    if which == "x":
        for t in tl:
            t.set_rotation_mode("anchor" if rotation not in (0, 90) else "default")
    if special is not None:
        for t, i in zip(tl, pos):
            if special[i]:
                t.set_color("0.45")
    if step > 1:
        # unlabelled positions still get small ticks so the scale reads correctly
        axis.set_ticks(range(n), minor=True)
        ax.tick_params(axis=which, which="minor", length=1.0, width=0.3)
    return step


def new_figure(spec: FigureSpec, width: float, height: float, constrained: bool = True) -> Figure:
    # whole pixels at the asked dpi, so a PNG is exactly round(width_in * dpi) wide
    width = max(1, round(width * spec.dpi)) / spec.dpi
    height = max(1, round(height * spec.dpi)) / spec.dpi
    fig = Figure(figsize=(width, height), dpi=spec.dpi, layout="constrained" if constrained else None)
    FigureCanvasAgg(fig)
    if constrained:
        fig.get_layout_engine().set(w_pad=2 * PT, h_pad=2 * PT, wspace=0.02, hspace=0.02)
    return fig


def model_name(result: AttentionResult) -> str:
    info = result.info or {}
    name = info.get("model_name") or info.get("name") or info.get("model") or ""
    name = str(name)
    if name.endswith(".onnx") or os.sep in name:
        name = os.path.splitext(os.path.basename(name))[0]
    return name


def make_title(result: AttentionResult, spec: FigureSpec, *parts: str) -> str:
    """``spec.title`` if given; else ``model · part · part``."""
    if spec.title is not None:
        return spec.title.replace("$", r"\$")
    bits = [p for p in (model_name(result), *parts) if p]
    return " · ".join(bits).replace("$", r"\$")


def fit_title(title: str, width_in: float, fs: float) -> str:
    """Wrap a title at its `` · `` separators so each line fits the figure width."""
    if not title:
        return title
    limit = 0.94 * width_in / (fs * CHAR_W * PT)  # characters per line
    lines: list[str] = []
    for para in title.split("\n"):
        cur = ""
        for part in para.split(" · "):
            cand = f"{cur} · {part}" if cur else part
            if cur and len(cand) > limit:
                lines.append(cur)
                cur = part
            else:
                cur = cand
        lines.append(cur)
    return "\n".join(lines)


def title_height(title: str, fs: float) -> float:
    """Inches taken by a (possibly multi-line) title at ``fs`` points, with its padding."""
    if not title:
        return 0.05
    return (title.count("\n") + 1) * fs * 1.25 * PT + 0.08


def clamp(v: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, v))


def shrink(m: np.ndarray, max_rows: int, max_cols: int) -> np.ndarray:
    """Block-average a map that has far more cells than pixels it will be drawn on (keeps files small)."""
    m = np.asarray(m, np.float32)
    fr = max(1, m.shape[0] // max(1, max_rows))
    fc = max(1, m.shape[1] // max(1, max_cols))
    if fr == 1 and fc == 1:
        return m
    r, c = -(-m.shape[0] // fr) * fr, -(-m.shape[1] // fc) * fc
    padded = np.full((r, c), np.nan, np.float32)
    padded[: m.shape[0], : m.shape[1]] = m
    return np.nanmean(padded.reshape(r // fr, fr, c // fc, fc), axis=(1, 3))
