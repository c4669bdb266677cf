"""Head stats of a speech encoder speak of frames and seconds: "mean dist." is the attention-weighted distance in
seconds (it read ~65 "tokens" for a 4 s wav2vec2 clip, i.e. frames), "prev. frame" / "first frame" name what the
columns measure; a text model's table is as it was."""

from __future__ import annotations

import numpy as np

from attnviz.core.attention import AttentionResult, AudioTrack, DenseMap, SiteInfo, TokenAxis
from attnviz.core.stats import STAT_COLUMNS
from attnviz.runtime.audio import frame_labels
from attnviz.runtime.waveform import WaveSpec


def _speech(rng) -> tuple[AttentionResult, np.ndarray]:
    spec = WaveSpec()  # wav2vec2-base's conv stack: 20 ms frames
    rate = spec.sampling_rate
    wave = (0.3 * np.sin(2 * np.pi * 300 * np.arange(2 * rate) / rate)).astype(np.float32)
    n = spec.positions(len(wave))
    w = rng.random((1, 2, n, n)).astype(np.float32) ** 8  # peaked rows: distances far from the uniform mean
    w /= w.sum(-1, keepdims=True)
    return AttentionResult(
        [DenseMap(w)],
        [SiteInfo("encoder", "self", 0, 2, "/e/0", "softmax")],
        tokens=TokenAxis(frame_labels(n, spec), values=spec.levels(wave, n)),
        audio=AudioTrack([wave], spec.display([wave]), rate, spec.hop_length, spec.frame_seconds),
    ), w


def _table(qtbot, w, result) -> tuple[list[str], list[dict[str, float]]]:
    w._show_result(result)
    w.select_view("stats")
    v, t = w.stats, w.stats.table
    qtbot.waitUntil(lambda: t.rowCount() == 2 and not v.busy, timeout=10000)
    titles = [t.horizontalHeaderItem(c).text().replace("\n", " ") for c in range(t.columnCount())]
    rows = []
    for r in range(t.rowCount()):
        rows.append({v.columns[c]: float(v.cell(r, c).value) for c in range(t.columnCount())})
    return titles, sorted(rows, key=lambda row: (row["layer"], row["head"]))


def test_a_speech_encoders_head_stats_are_in_frames_and_seconds(qtbot, window):
    r, weights = _speech(np.random.default_rng(3))
    titles, rows = _table(qtbot, window, r)
    assert "mean dist. (s)" in titles and "prev. frame" in titles and "first frame" in titles
    assert "prev. token" not in titles and "first token" not in titles
    m = weights[0]  # [H, T, T]
    n = m.shape[-1]
    gap = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    for h, row in enumerate(rows):
        frames = float((m[h] * gap).sum(-1).mean())  # by hand: weighted |i - j| in frames, mean over the rows
        assert abs(row["distance"] - frames * 0.02) < 1e-4, (h, row["distance"], frames)
        assert abs(row["prev"] - float(np.mean([m[h, i, i - 1] for i in range(1, n)]))) < 1e-5
        assert abs(row["first"] - float(m[h, :, 0].mean())) < 1e-5


def test_a_text_models_head_stats_are_unchanged(qtbot, window):
    rng = np.random.default_rng(4)
    w = rng.random((1, 2, 6, 6)).astype(np.float32)
    w /= w.sum(-1, keepdims=True)
    r = AttentionResult(
        [DenseMap(w)],
        [SiteInfo("encoder", "self", 0, 2, "/e/0", "softmax")],
        tokens=TokenAxis(["[CLS]", "the", "cat", "sat", "down", "[SEP]"]),
    )
    titles, rows = _table(qtbot, window, r)
    assert titles == ["layer", "head"] + [label for label, _ in STAT_COLUMNS.values()]
    gap = np.abs(np.arange(6)[:, None] - np.arange(6)[None, :])
    m = w[0]
    assert abs(rows[1]["distance"] - float((m[1] * gap).sum(-1).mean())) < 1e-5  # in tokens, as before
