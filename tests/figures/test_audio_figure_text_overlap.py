"""The Audio regions figure of the speech demo at --font-size 6–12: no drawn text runs into another (at 11 pt the
padding's note "weight after the clip" overlapped "time (s)" on one line, and near words ran together, "onetwo").
Every text the renderer draws (word labels, tick labels, axis titles, the title, the note) is measured by the
renderer itself, page widths single and default."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("onnxruntime")
pytest.importorskip("soundfile")

from attnviz.core import view as vm
from attnviz.figures.audio import draw_audio, word_rows
from attnviz.figures.spec import FigureStyle

DEMO = Path(__file__).resolve().parents[2] / "models" / "spoken-digits"


@pytest.fixture(scope="module")
def result():
    if not (DEMO / "encoder_model.onnx").is_file():
        pytest.skip("models/spoken-digits is not in this checkout")
    from attnviz.runtime import open_model

    return open_model(DEMO, provider="cpu").analyze(audio=str(DEMO / "sample.wav"), generate=8)


def _ticks(ax, axis):
    """The tick labels matplotlib draws: those of ticks within the axis's limits (it lays out others, unseen)."""
    lo, hi = sorted(ax.get_xlim() if axis == "x" else ax.get_ylim())
    locs = ax.get_xticks() if axis == "x" else ax.get_yticks()
    labels = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return [t for v, t in zip(locs, labels) if lo - 1e-9 <= v <= hi + 1e-9]


def drawn_texts(fig):
    """(text, window extent) of every visible, non-empty text the renderer draws: the figure's own, and each axes'
    texts, titles and drawn tick labels."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = list(fig.texts)
    for ax in fig.axes:
        texts += [*ax.texts, ax.xaxis.label, ax.yaxis.label, ax.title, *_ticks(ax, "x"), *_ticks(ax, "y")]
    out = []
    for t in texts:
        if t.get_visible() and t.get_text().strip():
            box = t.get_window_extent(renderer)
            if box.width > 0 and box.height > 0:
                out.append((t.get_text(), box))
    return out


@pytest.mark.parametrize("width", [None, 3.5])
@pytest.mark.parametrize("fs", [6, 7, 8, 9, 10, 11, 12])
def test_no_text_of_the_speech_demos_audio_figure_runs_into_another(result, fs, width):
    cross = next(i for i, b in enumerate(result.blocks()) if b.kind == "cross")
    sel = vm.Selection(block=cross, mode="head", layer=1, head=0, query=4)
    fig = draw_audio(result, sel, FigureStyle(font_size=fs, width_in=width))
    texts = drawn_texts(fig)
    words = [t for t, _ in texts]
    assert "time (s)" in words and any(w.startswith("weight after the clip") for w in words)
    assert {"nine", "three", "two"} <= set(words)  # the words' labels are among them
    page = fig.bbox
    for (a, box_a), (b, box_b) in itertools.combinations(texts, 2):
        assert not box_a.overlaps(box_b), (fs, width, a, b)
    for t, box in texts:  # on the page
        assert box.x0 >= -0.5 and box.x1 <= page.x1 + 0.5 and box.y0 >= -0.5 and box.y1 <= page.y1 + 0.5, (fs, t)


def test_word_rows_put_a_label_that_would_touch_the_last_on_the_next_line():
    # "one" at 1.60 s, 0.2 s wide; "two" at 1.82 s: 0.02 s after it, under the 0.05-s gap -> line 1
    places = word_rows([0.0, 1.6, 1.82, 2.5], [0.3, 0.2, 0.2, 0.2], 2.6, 0.05, 3)
    assert places == [(0.0, 0), (1.6, 0), (1.82, 1), (2.4, 0)]  # the last moved left to end within the clip
