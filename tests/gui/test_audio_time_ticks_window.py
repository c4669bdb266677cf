"""The head map's frame axis labels round times (as the figure, tests/figures/test_audio_time_ticks.py): a 10 s
wav2vec2 clip over 600 px showed 0.78 s, 1.56 s, ...; a zoomed window labels the round times inside it."""

from __future__ import annotations

import pytest

from attnviz.gui.views.heatmap import TokenAxis
from attnviz.runtime.audio import frame_labels
from attnviz.runtime.waveform import WaveSpec


@pytest.mark.parametrize("orientation", ["bottom", "left"])
def test_the_frame_axis_labels_round_times(qtbot, orientation):
    axis = TokenAxis(orientation)
    labels = frame_labels(500, WaveSpec())  # 20 ms frames, 0.00 .. 9.98 s
    axis.set_labels(labels)
    for lo, hi in ((0.0, 500.0), (37.0, 121.0), (200.0, 230.0)):
        shown = axis.shown(lo, hi, 600.0)
        times = [float(labels[i][:-2]) for i in shown]
        assert len(times) >= 2, (lo, hi, times)
        gaps = {round(b - a, 6) for a, b in zip(times, times[1:])}
        assert len(gaps) == 1 and gaps.pop() in {0.02, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0}, (lo, hi, times)
        stride = round(times[1] - times[0], 6)
        assert all(abs(t / stride - round(t / stride)) < 1e-6 for t in times), (lo, hi, times)
    # word tokens keep the even stride with the first and the last (tests/gui/test_token_labels.py)
    axis.set_labels([f"word{i}" for i in range(500)])
    shown = axis.shown(0.0, 500.0, 600.0)
    assert shown[0] == 0 and shown[-1] == 499
