"""The Audio regions figure: the waveform, the log-mel spectrogram, the query's attention as a heat band and a
curve, on one time axis -- the numbers of :func:`attnviz.core.audio_view.audio_view`, as the window draws them."""

from __future__ import annotations

import numpy as np

from attnviz.core import audio_view as av
from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult
from attnviz.figures.cells import as_vector_cells
from attnviz.figures.layout import PT, colormap_for, fit_title, make_title, new_figure, text_width_in, title_height
from attnviz.figures.spec import FigureStyle

# panel heights, inches: waveform, spectrogram, heat band, curve
PANELS_IN = (0.75, 1.0, 0.14, 0.85)
GAP_IN = 0.05
WAVE_GREY = "0.35"


def audio_selection(sel: vm.Selection) -> vm.Selection:
    """Audio regions draw a whole row of one query: no step cut, no hidden tokens, no kept mass (as on screen)."""
    return sel.with_(keep=1.0, hide_special=False)


def _time_axes(ax, view: av.AudioView, fs: float, bottom: bool) -> None:
    ax.set_xlim(0.0, view.duration)
    ax.tick_params(labelsize=fs - 1, length=2, width=0.5, labelbottom=bottom)
    for side in ax.spines.values():
        side.set_linewidth(0.5)


# the word labels on the waveform: a line's height at their size (ems), the room between two on one line (ems), and
# the lines the waveform panel holds at most (a label past them goes on the line where it overlaps least)
WORD_LINE_EM = 1.2
WORD_GAP_EM = 0.4


def word_rows(
    starts: list[float], widths: list[float], duration: float, gap: float, lines: int
) -> list[tuple[float, int]]:
    """Where each word label goes on the waveform, ``(x, line)`` (line 0 at the top): at its word's start, on the
    first line where it clears the labels already there by ``gap`` (seconds, as ``widths``), moved left to end
    within the clip.  Near words ("one" at 1.60 s, "two" at 1.82 s) ran together on one line ("onetwo")."""
    ends = [-np.inf] * max(1, lines)
    out = []
    for start, w in zip(starts, widths):
        x = max(0.0, min(start, duration - w))
        free = [i for i, end in enumerate(ends) if x >= end + gap]
        line = free[0] if free else int(np.argmin(ends))
        ends[line] = x + w
        out.append((x, line))
    return out


def _bottom_in(fs: float, note: bool) -> float:
    """The margin under the curve: its tick labels, "time (s)" under them and, below both, the padding's note
    (at 7 pt the 0.42 in it always had; at 11 pt the note, beside "time (s)" on one line, ran into it)."""
    ticks = 2 + 3.5 + 1.2 * (fs - 1)  # tick length, pad, label
    label = 2 + 1.2 * fs  # labelpad, "time (s)"
    under = 1.2 * (fs - 2) if note else 0.0
    return max(0.42, (ticks + label + 2) * PT) + under * PT


def _mark_query(ax, view: av.AudioView) -> None:
    span = view.query_span
    if span is not None:  # the clicked frame, on the sound it belongs to
        ax.axvspan(*span, color=av.QUERY_COLOUR, alpha=0.45, lw=0)


def draw_audio(result: AttentionResult, sel: vm.Selection, style: FigureStyle):
    view = av.audio_view(result, audio_selection(sel))
    fs = float(style.font_size)
    width = style.fixed_width or 6.0
    title = fit_title(make_title(result, style, view.title), width, fs + 1)
    title_in = title_height(title, fs + 1)
    # the left margin holds the curve's top label and the axis titles beside it: a long clip's small weights
    # ("0.000773") pushed "weight" off the page at a fixed 0.55 in
    top_label = f"{view.vmax:.3g}"
    left = max(0.55, text_width_in([top_label], fs - 1) + 1.6 * fs * PT + 0.12)
    right, bottom_in = 0.12, _bottom_in(fs, view.padding_mass is not None)
    heights = PANELS_IN
    height = title_in + sum(heights) + GAP_IN * (len(heights) - 1) + bottom_in
    fig = new_figure(style, width, height, constrained=False)
    axes = []
    top = height - title_in
    for h in heights:
        top -= h
        axes.append(fig.add_axes((left / width, top / height, (width - left - right) / width, h / height)))
        top -= GAP_IN
    ax_wave, ax_spec, ax_band, ax_curve = axes

    # the waveform, min/max per bin, and the word spans on it
    ax_wave.fill_between(view.env_times, view.env_lo, view.env_hi, step="post", color=WAVE_GREY, lw=0)
    peak = max(float(np.abs(view.env_lo).max()), float(np.abs(view.env_hi).max()), 1e-6)
    ax_wave.set_ylim(-1.05 * peak, 1.05 * peak)
    ax_wave.set_yticks([])
    ax_wave.set_ylabel("sound", fontsize=fs)
    for span in view.spans:
        ax_wave.axvspan(span.start, span.end, color=av.SPAN_COLOUR, alpha=0.18, lw=0, zorder=0)  # under the wave
    per_in = view.duration / (width - left - right)  # seconds per inch of the time axis
    line_in = WORD_LINE_EM * (fs - 1) * PT
    places = word_rows(
        [sp.start for sp in view.spans],
        [text_width_in([sp.word], fs - 1) * per_in for sp in view.spans],
        view.duration,
        WORD_GAP_EM * (fs - 1) * PT * per_in,
        int(heights[0] // line_in),
    )
    for sp, (at, line) in zip(view.spans, places):
        y = peak - 2.1 * peak * line * line_in / heights[0]  # lines down from the first (the panel: 2.1 peaks)
        ax_wave.text(at, y, sp.word, fontsize=fs - 1, va="top", ha="left", clip_on=True)
    _mark_query(ax_wave, view)

    # the log-mel spectrogram (low frequencies at the bottom)
    mels = view.spec.shape[0]
    as_vector_cells(  # in a PDF or SVG: a pixel a (mel, frame) cell, as the maps
        ax_spec.imshow(
            view.spec,
            cmap="gray",
            vmin=0.0,
            vmax=1.0,
            origin="lower",
            aspect="auto",
            interpolation="nearest",
            extent=(0.0, view.spec_seconds, 0.0, mels),
        )
    )
    ax_spec.set_yticks([0, mels])
    ax_spec.set_ylabel("mel", fontsize=fs)
    _mark_query(ax_spec, view)

    # the heat band: the curve's weights as colours, frame by frame
    n = len(view.curve)
    as_vector_cells(
        ax_band.imshow(
            view.heat[None, :],
            cmap=colormap_for(style, "audio"),
            vmin=0.0,
            vmax=1.0,
            aspect="auto",
            interpolation="nearest",
            extent=(0.0, n * view.frame_seconds, 0.0, 1.0),
        )
    )
    ax_band.set_yticks([])

    # the curve: the weight on each frame, at the frame's centre
    x = view.times + view.frame_seconds / 2
    ax_curve.fill_between(x, 0.0, view.curve, color=av.CURVE_COLOUR, alpha=0.25, lw=0)
    ax_curve.plot(x, view.curve, color=av.CURVE_COLOUR, lw=0.8)
    ax_curve.set_ylim(0.0, 1.05 * view.vmax)
    ax_curve.set_yticks([0.0, view.vmax], labels=["0", top_label])
    # the "0" sits on the axis, above it, not centred on it: from 10 pt on, centred, it ran into the time axis's "0.0"
    ax_curve.get_yticklabels()[0].set_verticalalignment("bottom")
    ax_curve.set_ylabel("weight", fontsize=fs)
    ax_curve.set_xlabel("time (s)", fontsize=fs, labelpad=2)
    for ax in axes:
        _time_axes(ax, view, fs, ax is ax_curve)
    if title:
        fig.text(0.5, 1 - 0.04 / height, title, ha="center", va="top", fontsize=fs + 1)
    if view.padding_mass is not None:
        fig.text(
            1 - 0.02 / width,
            0.02 / height,
            f"weight after the clip (padding): {view.padding_mass:.2f}",
            ha="right",
            va="bottom",
            fontsize=fs - 2,
            color="0.4",
        )
    return fig
