"""The Audio regions figure of a long clip: a frame's weights over 1,500 frames are small ("0.000667"), and the
curve's top label and its "weight" title both stay on the page (at a fixed 0.55 in margin the title was pushed off
its left edge, half a letter showing)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult, AudioTrack, DenseMap, SiteInfo, TokenAxis
from attnviz.figures.audio import draw_audio
from attnviz.figures.spec import FigureStyle
from attnviz.runtime.audio import frame_labels
from attnviz.runtime.waveform import WaveSpec


def test_a_long_clips_small_weights_keep_their_axis_title_on_the_page():
    spec = WaveSpec()  # wav2vec2-base's conv stack: 20 ms frames
    rate = spec.sampling_rate
    wave = (0.3 * np.sin(2 * np.pi * 300 * np.arange(30 * rate) / rate)).astype(np.float32)
    n = spec.positions(len(wave))
    row = np.full((1, 1, n, n), 1.0 / n, np.float32)  # every frame looks at all of them alike: 1/1499 each
    r = AttentionResult(
        [DenseMap(row)],
        [SiteInfo("encoder", "self", 0, 1, "/e/0", "softmax")],
        tokens=TokenAxis(frame_labels(n, spec), values=spec.levels(wave, n)),
        audio=AudioTrack([wave], spec.display([wave]), rate, spec.hop_length, spec.frame_seconds),
    )
    fig = draw_audio(r, vm.Selection(block=0, mode="head", layer=0, head=0, query=0), FigureStyle())
    fig.canvas.draw()
    curve = fig.axes[-1]
    labels = [t.get_text() for t in curve.get_yticklabels()]
    assert labels == ["0", f"{1.0 / n:.3g}"] and len(labels[1]) >= 8
    renderer = fig.canvas.get_renderer()
    for text in (curve.yaxis.label, *curve.get_yticklabels()):
        box = text.get_window_extent(renderer)
        assert box.x0 >= 0, (text.get_text(), box.x0)  # on the page
    assert curve.yaxis.label.get_text() == "weight"
