"""Which blocks' keys are a clip's frames with times (their Head stats speak of frames and seconds), and the
columns' titles there; every other context keeps the token titles."""

from __future__ import annotations

import numpy as np

from attnviz.core.attention import AttentionResult, AudioTrack, DenseMap, SiteInfo, TokenAxis
from attnviz.core.stats import STAT_COLUMNS, key_frame_seconds, stat_columns, stats_in_seconds
from attnviz.runtime.audio import frame_labels
from attnviz.runtime.waveform import WaveSpec


def _maps(n: int, heads: int = 1) -> np.ndarray:
    return np.full((1, heads, n, n), 1.0 / n, np.float32)


def test_only_frame_keys_with_times_count_as_frames():
    spec = WaveSpec()
    rate = spec.sampling_rate
    wave = (0.3 * np.sin(2 * np.pi * 300 * np.arange(rate) / rate)).astype(np.float32)
    n = spec.positions(len(wave))
    track = AudioTrack([wave], spec.display([wave]), rate, spec.hop_length, spec.frame_seconds)
    site = [SiteInfo("encoder", "self", 0, 1, "/e/0", "softmax")]
    speech = AttentionResult([DenseMap(_maps(n))], site, tokens=TokenAxis(frame_labels(n, spec)), audio=track)
    assert key_frame_seconds(speech.blocks()[0]) == spec.frame_seconds == 0.02
    # the same frames without the sound (no times known), and words with a sound: no
    bare = AttentionResult([DenseMap(_maps(n))], site, tokens=TokenAxis(frame_labels(n, spec)))
    assert key_frame_seconds(bare.blocks()[0]) is None
    words = AttentionResult([DenseMap(_maps(3))], site, tokens=TokenAxis(["a", "b", "c"]), audio=track)
    assert key_frame_seconds(words.blocks()[0]) is None


def test_the_audio_columns_titles_and_the_distance_in_seconds():
    audio = stat_columns("audio")
    assert [audio[k][0] for k in ("distance", "prev", "first")] == ["mean dist. (s)", "prev. frame", "first frame"]
    assert list(audio) == list(STAT_COLUMNS)  # every statistic still shown
    assert {k: v[0] for k, v in stat_columns("text").items()} == {k: v[0] for k, v in STAT_COLUMNS.items()}
    cross = stat_columns("cross-audio")
    assert "diag" not in cross and "prev" not in cross and "distance" not in cross  # word i vs frame i
    assert cross["first"][0] == "first frame"
    # 65 frames of 20 ms apart: 1.3 s; the other statistics as they were
    assert stats_in_seconds({"distance": 65.0, "prev": 0.25}, 0.02) == {"distance": 65.0 * 0.02, "prev": 0.25}
