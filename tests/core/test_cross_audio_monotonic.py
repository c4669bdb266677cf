"""A speech decoder's cross-attention in the Head stats: text rows against the clip's frames have no diagonal,
previous token or distance, and show "monotonic" in their place: the share of rows whose most-attended frame is at
or after the previous row's (counted here by hand on a made-up map)."""

from __future__ import annotations

import math

import numpy as np

from attnviz.core.attention import AttentionResult, AudioTrack, DenseMap, SiteInfo, TokenAxis
from attnviz.core.head_stats import compute_stats, stats_context
from attnviz.core.stats import monotonic_alignment, stat_columns
from attnviz.runtime.audio import frame_labels
from attnviz.runtime.waveform import WaveSpec

FRAMES = 10
# head 0 reads forward (argmax frames 0, 2, 2, 5, 9: every step forward or staying); head 1 jumps about
# (argmax 7, 1, 4, 0, 8: forward from 1 to 4 and from 0 to 8 only)
PEAKS = ([0, 2, 2, 5, 9], [7, 1, 4, 0, 8])


def _cross_map() -> np.ndarray:
    w = np.full((1, 2, len(PEAKS[0]), FRAMES), 0.02, np.float32)
    for h, peaks in enumerate(PEAKS):
        for i, k in enumerate(peaks):
            w[0, h, i, k] = 1.0
    return w / w.sum(-1, keepdims=True)


def _speech_result() -> AttentionResult:
    spec = WaveSpec()
    rate = spec.sampling_rate
    wave = (0.3 * np.sin(2 * np.pi * 300 * np.arange(int(0.215 * rate)) / rate)).astype(np.float32)
    assert spec.positions(len(wave)) == FRAMES
    enc = np.full((1, 2, FRAMES, FRAMES), 1.0 / FRAMES, np.float32)
    return AttentionResult(
        [DenseMap(enc), DenseMap(_cross_map())],
        [SiteInfo("encoder", "self", 0, 2, "/e/0", "softmax"), SiteInfo("decoder", "cross", 0, 2, "/d/0", "softmax")],
        tokens=TokenAxis(frame_labels(FRAMES, spec)),
        key_tokens=TokenAxis(["<|sot|>", "the", "cat", "sat", "."]),
        audio=AudioTrack([wave], spec.display([wave]), rate, spec.hop_length, spec.frame_seconds),
    )


def test_monotonic_by_hand():
    # by hand: head 0's 4 steps 0->2, 2->2, 2->5, 5->9 all forward; head 1's 7->1 no, 1->4 yes, 4->0 no, 0->8 yes
    w = _cross_map()[0]
    assert monotonic_alignment(w[0]) == 1.0
    assert monotonic_alignment(w[1]) == 0.5
    assert math.isnan(monotonic_alignment(w[0, :1]))  # one row: no step to judge


def test_the_cross_audio_table_has_monotonic_in_place_of_the_position_columns():
    r = _speech_result()
    cross = next(b for b in r.blocks() if b.kind == "cross")
    assert stats_context(r, cross) == "cross-audio"
    columns = stat_columns("cross-audio")
    assert "monotonic" in columns and not {"diag", "prev", "distance"} & set(columns)
    assert list(columns)[:2] == ["entropy", "monotonic"]
    rows = compute_stats(r, cross, -1)
    assert [row["monotonic"] for row in rows] == [1.0, 0.5]
    assert all(set(columns) <= set(row) for row in rows)  # every shown column has its value
    # the encoder's self-attention over the frames, and a text model's cross: no such column
    enc = next(b for b in r.blocks() if b.kind == "self")
    assert stats_context(r, enc) == "audio" and "monotonic" not in stat_columns("audio")
    assert "monotonic" not in compute_stats(r, enc, -1)[0]
    assert "monotonic" not in stat_columns("cross") and "monotonic" not in stat_columns("text")
