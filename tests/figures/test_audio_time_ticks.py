"""An audio encoder's frame axis is labelled at round times (0.5 s / 1 s / 5 s strides chosen by the span), in the
figure as in the window: an even stride of 20 ms frames labelled 0.78 s, 1.56 s, ... which no reader counts in."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult, AudioTrack, DenseMap, SiteInfo, TokenAxis
from attnviz.figures.render import render_spec
from attnviz.figures.spec import FigureSpec
from attnviz.runtime.audio import frame_labels
from attnviz.runtime.waveform import WaveSpec


def _seconds(label: str) -> float:
    assert label.endswith(" s"), label
    return float(label[:-2])


def test_time_ticks_by_hand():
    spec = WaveSpec()  # 20 ms frames
    labels = frame_labels(500, spec)  # 0.00 .. 9.98 s
    step = vm.frame_step(labels)
    assert step == pytest.approx(0.02)
    # 10 s: twelve labels fit -> 1 s strides (0.5 s would make 20), frames 0, 50, ..., 450
    assert vm.time_tick_indices(0, 499, step, 12) == list(range(0, 500, 50))
    assert vm.time_tick_indices(0, 499, step, 40) == list(range(0, 500, 25))  # 0.5 s: 20 ticks
    assert vm.time_tick_indices(0, 499, step, 3) == [0, 250]  # 5 s
    # a visible window 0.74..2.40 s: the round times inside it (1.0, 1.5, 2.0 s), never its edges
    assert vm.time_tick_indices(37, 120, step, 6) == [50, 75, 100]
    # the focused frame is labelled; a tick nearer than a label's extent (84/6 = 14 frames) makes way
    assert vm.time_tick_indices(37, 120, step, 6, focus=95) == [50, 75, 95]
    # a CTC head's frames carry the letter each chose after the time (runtime/ctc.py)
    assert vm.frame_step([f"{t} A" if i % 3 else t for i, t in enumerate(labels)]) == pytest.approx(0.02)
    # not times: word tokens, or frames with one dropped (special tokens hidden)
    assert vm.frame_step(["the", "cat"]) is None
    assert vm.frame_step(labels[:3] + labels[4:]) is None


def test_a_speech_heatmap_figure_ticks_its_frames_at_round_times():
    spec = WaveSpec()
    rate = spec.sampling_rate
    wave = (0.3 * np.sin(2 * np.pi * 300 * np.arange(10 * rate) / rate)).astype(np.float32)
    n = spec.positions(len(wave))
    rng = np.random.default_rng(0)
    w = rng.random((1, 1, n, n)).astype(np.float32)
    r = AttentionResult(
        [DenseMap(w / w.sum(-1, keepdims=True))],
        [SiteInfo("encoder", "self", 0, 1, "/e/0", "softmax")],
        tokens=TokenAxis(frame_labels(n, spec), values=spec.levels(wave, n)),
        audio=AudioTrack([wave], spec.display([wave]), rate, spec.hop_length, spec.frame_seconds),
    )
    fig = render_spec(r, FigureSpec(view="heatmap", layer=0, head=0, width="single"))
    fig.canvas.draw()
    (ax,) = [a for a in fig.axes if a.get_xticklabels() and a.get_xticklabels()[0].get_text().endswith(" s")]
    for texts in ([t.get_text() for t in ax.get_xticklabels()], [t.get_text() for t in ax.get_yticklabels()]):
        times = [_seconds(t) for t in texts]
        assert len(times) >= 3, texts
        gaps = set(np.round(np.diff(times), 6))
        assert len(gaps) == 1, texts  # one stride
        stride = gaps.pop()
        assert stride in {0.5, 1.0, 2.0, 5.0}, texts  # ten seconds on a column's width
        assert all(abs(t / stride - round(t / stride)) < 1e-6 for t in times), texts  # on round times
