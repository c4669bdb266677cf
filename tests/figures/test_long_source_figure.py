"""A map of few rows over a long source axis (a speech model's 200 frames of 20 ms, five words) is a page wide
and no flatter than 4:1, its time axis labelled level at round seconds; it drew 16 x 1.7 inches, its rows a line
each.  A source of words short enough to label keeps every label as before.  The kinds of result and the view
each opens on (core.view.opening) are checked here too, against the results' own makings."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from figure_data import _axis, encdec_result, softmax_maps, text_result, vision_result

from attnviz.core.attention import AttentionResult, AudioTrack, DenseMap, PatchGrid, SiteInfo, TokenAxis
from attnviz.core.view import OPENING_VIEWS, opening_view, result_kind
from attnviz.core.view.opening import KIND_TESTS
from attnviz.core.view_names import FIGURE_VIEWS, TAB_VIEWS
from attnviz.figures import FigureSpec, figure_bytes, render_spec
from attnviz.figures.views import VIEW_DRAWERS
from attnviz.runtime.audio import frame_labels
from attnviz.runtime.waveform import WaveSpec

ROOT = Path(__file__).resolve().parents[2]
WORDS = ["<|startoftranscript|>", "nine", "three", "one", "two", "<|endoftext|>"]


def speech_result(seconds: float = 4.0, words=WORDS) -> AttentionResult:
    """A Whisper-like run: encoder self-attention over ``seconds`` of 20-ms frames, a decoder whose cross-attention
    reads them, and the sound."""
    spec = WaveSpec()
    rate = spec.sampling_rate
    wave = (0.3 * np.sin(2 * np.pi * 300 * np.arange(int(seconds * rate)) / rate)).astype(np.float32)
    n = spec.positions(len(wave))
    rng = np.random.default_rng(3)
    td = len(words)
    maps = [
        DenseMap(softmax_maps(rng, 2, n, n)),
        DenseMap(softmax_maps(rng, 2, td, td, causal=True)),
        DenseMap(softmax_maps(rng, 2, td, n, shift=30)),
    ]
    sites = [
        SiteInfo("encoder", "self", 0, 2, "e0", "softmax"),
        SiteInfo("decoder", "self", 0, 2, "ds0", "softmax"),
        SiteInfo("decoder", "cross", 0, 2, "dc0", "softmax"),
    ]
    return AttentionResult(
        maps,
        sites,
        tokens=TokenAxis(frame_labels(n, spec)),
        key_tokens=_axis(words, special=(words[0], words[-1])),
        generated=words[1:],
        prompt_len=1,
        audio=AudioTrack([wave], spec.display([wave]), rate, spec.hop_length, spec.frame_seconds),
        info={"model": "tiny-whisper"},
    )


def media_box(pdf: bytes) -> tuple[float, float]:
    """The page's width and height in points, read from the PDF's own bytes."""
    x0, y0, x1, y1 = (
        float(v) for v in re.search(rb"/MediaBox \[ *([\d.]+) ([\d.]+) ([\d.]+) ([\d.]+) *\]", pdf).groups()
    )
    return x1 - x0, y1 - y0


def map_axes(fig):
    return next(a for a in fig.axes if a.images)


def test_a_speech_alignment_is_a_page_wide_and_no_flatter_than_four_to_one():
    r = speech_result()
    assert len(r.tokens.labels) >= 190  # the premise: 4 s of 20-ms frames under five words
    for view in ("alignment", "heatmap"):
        spec = FigureSpec(view=view, block="decoder cross", layer=0, head=0)
        w, h = media_box(figure_bytes(render_spec(r, spec), "pdf"))
        assert w <= 7 * 72 + 0.5, (view, w, h)  # a page's width: it was 16 in
        assert w / h <= 4.0, (view, w, h)  # the page: it was 9:1
        fig = render_spec(r, spec)
        fig.canvas.draw()
        box = map_axes(fig).get_window_extent()  # the map's own rectangle, in the drawn figure's pixels
        assert box.width / box.height <= 4.0 + 1e-6, (view, box)
        assert box.height >= 0.9 * fig.dpi, (view, box)  # five words' rows a band, not a line each


def test_its_time_axis_reads_level_at_round_seconds_without_overlap():
    r = speech_result()
    fig = render_spec(r, FigureSpec(view="alignment", layer=0, head=0))
    fig.canvas.draw()
    ax = map_axes(fig)
    labels = [t for t in ax.get_xticklabels() if t.get_text()]
    times = [float(t.get_text().removesuffix(" s")) for t in labels]
    assert all(t.get_text().endswith(" s") for t in labels)
    assert all(t.get_rotation() == 0 for t in labels)  # level, as a time axis's labels read
    assert len(times) >= 4
    stride = times[1] - times[0]
    assert stride in (0.2, 0.5, 1.0) and np.allclose(np.diff(times), stride)
    assert all(abs(t / stride - round(t / stride)) < 1e-9 for t in times)
    renderer = fig.canvas.get_renderer()
    boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
    assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:]))  # no two labels touch
    assert all(fig.bbox.x0 <= b.x0 and b.x1 <= fig.bbox.x1 for b in boxes)  # none runs off the page


def test_a_source_of_words_that_can_be_labelled_keeps_every_label():
    """Not a long source: the translation's cross-attention is sized to its labels, every word on its tick, upright
    as before (and a few dozen words stay so: only hundreds are thinned at any width)."""
    source = ["<s>"] + [f"w{i}" for i in range(80)] + ["</s>"]
    r = encdec_result()
    for view in ("alignment",):
        fig = render_spec(r, FigureSpec(view=view, layer=0, head=0))
        fig.canvas.draw()
        ax = map_axes(fig)
        assert [t.get_text() for t in ax.get_xticklabels()] == ["<s>", "das", "Haus", "ist", "klein", "</s>"]
        assert all(t.get_rotation() == 90 for t in ax.get_xticklabels())
    rng = np.random.default_rng(0)
    many = AttentionResult(
        [DenseMap(softmax_maps(rng, 1, 4, len(source)))],
        [SiteInfo("decoder", "cross", 0, 1, "dc0", "softmax")],
        tokens=_axis(source),
        key_tokens=_axis(["<s>", "a", "b", "c"]),
        info={"model": "m"},
    )
    fig = render_spec(many, FigureSpec(view="heatmap", layer=0, head=0))
    fig.canvas.draw()
    assert [t.get_text() for t in map_axes(fig).get_xticklabels()] == source
    assert fig.get_size_inches()[0] > 7  # sized to its 82 labels, not to a page


def test_the_speech_demos_alignment_pdf_from_the_command_line(tmp_path):
    demo = ROOT / "models" / "spoken-digits"
    if not (demo / "encoder_model.onnx").is_file():
        pytest.skip("models/spoken-digits is not in this checkout")
    out = tmp_path / "a.pdf"
    run = subprocess.run(
        [sys.executable, "-m", "attnviz", "figure", str(demo), "--view", "alignment", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    w, h = media_box(out.read_bytes())
    assert w <= 7 * 72 + 0.5 and w / h <= 4.0, (w, h)  # it was 1152 x 125 pt


def dual_result() -> AttentionResult:
    rng = np.random.default_rng(5)
    maps = [DenseMap(softmax_maps(rng, 2, 5, 5)), DenseMap(softmax_maps(rng, 2, 4, 4))]
    sites = [
        SiteInfo("encoder", "self", 0, 2, "v0", "softmax", tower="image"),
        SiteInfo("encoder", "self", 0, 2, "t0", "softmax", tower="text"),
    ]
    return AttentionResult(maps, sites, tokens=_axis(["[CLS]", "p0", "p1", "p2", "p3"]), info={"model": "clip"})


def vlm_result() -> AttentionResult:
    words = ["<s>", "<image>", "<image>", "<image>", "<image>", "a", "cat"]
    rng = np.random.default_rng(6)
    return AttentionResult(
        [DenseMap(softmax_maps(rng, 2, len(words), len(words), causal=True))],
        [SiteInfo("decoder", "self", 0, 2, "d0", "softmax")],
        tokens=_axis(words),
        token_grid=PatchGrid(2, 2, 1),
        info={"model": "vlm"},
    )


# each result as made above -> the kind of model that made it
MADE = {
    "text": text_result,
    "translation": encdec_result,
    "image": vision_result,
    "captioning": lambda: vision_result(decoder=True),
    "speech": speech_result,
    "dual encoder": dual_result,
    "vision-language": vlm_result,
}
KIND_OF = {"translation": "text"}


@pytest.mark.parametrize("made", list(MADE))
def test_each_kind_of_result_opens_on_a_view_that_draws_it(made):
    r = MADE[made]()
    kind = KIND_OF.get(made, made)
    assert result_kind(r) == kind
    opening = opening_view(r)
    assert opening is OPENING_VIEWS[kind]
    assert opening.window in TAB_VIEWS and opening.figure in FIGURE_VIEWS
    for view in {opening.window, opening.figure} & set(VIEW_DRAWERS):
        assert VIEW_DRAWERS[view][1](r) is None, (made, view)  # the view applies: no reason it cannot draw
    assert (opening.window, opening.figure) == (("audio", "audio") if kind == "speech" else ("overview", "heatmap"))


def test_every_kind_found_has_an_opening_view():
    assert [kind for kind, _ in KIND_TESTS] == list(OPENING_VIEWS)
