"""Head stats follow the maps' cut to a speech clip's frames (core.view.clip): the bundled Whisper demo pads its
2.3-s sample to a 4-s window (200 frames of 20 ms), and the table's statistics were of all 200, 84 frames of
silence the user never recorded included, while every map ended with the clip.  The clip's frame count is worked
out here from the WAV's own header (soundfile) and the folder's preprocessor_config.json (a frame is two mel hops),
each statistic by hand from the result's raw maps."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("soundfile")
pytest.importorskip("onnxruntime")

from spoken_demo import demo_and_clip

from attnviz.core.head_stats import compute_stats, stats_caption


@pytest.fixture(scope="module")
def demo():
    return demo_and_clip()


def block(result, stack, kind):
    return next(b for b in result.blocks() if (b.stack, b.kind) == (stack, kind))


def entropy(m: np.ndarray) -> float:
    """Mean row entropy in bits of ``m``'s rows, each rescaled to sum to 1 (as the table states)."""
    p = m / m.sum(-1, keepdims=True)
    return float(np.mean([-sum(x * math.log2(x) for x in row if x > 0) for row in p]))


def row(rows, layer, head):
    return next(r for r in rows if (r["layer"], r["head"]) == (layer, head))


def test_the_encoders_stats_are_of_the_clip_by_the_clip(demo):
    result, clip = demo
    blk = block(result, "encoder", "self")
    raw = np.asarray(blk.layer(1), np.float64)[2]  # [200, 200]: the run's own numbers
    assert (clip, raw.shape[-1]) == (116, 200)  # the premise: 2.3 s of a 4-s window
    got = row(compute_stats(result, blk, -1), 1, 2)
    assert got["entropy"] == pytest.approx(entropy(raw[:clip, :clip]), rel=1e-9)
    assert got["entropy"] != pytest.approx(entropy(raw), rel=1e-3)  # the cut changes the number
    # the weight on the padding is not an attention sink's: "row sum" is of each clip row whole (1: a softmax)
    assert got["row_sum"] == pytest.approx(float(raw[:clip].sum(-1).mean()), rel=1e-9)
    whole = row(compute_stats(result, blk, -1, padding=True), 1, 2)
    assert whole["entropy"] == pytest.approx(entropy(raw), rel=1e-9)


def test_the_decoders_cross_stats_keep_its_rows_and_the_clips_frames(demo):
    result, clip = demo
    blk = block(result, "decoder", "cross")
    raw = np.asarray(blk.layer(0), np.float64)[3]  # [rows, 200]
    got = row(compute_stats(result, blk, -1), 0, 3)
    cut = raw[:, :clip] / raw[:, :clip].sum(-1, keepdims=True)
    assert got["first"] == pytest.approx(float(cut[:, 0].mean()), rel=1e-9)
    assert got["max"] == pytest.approx(float(cut.max(-1).mean()), rel=1e-9)
    whole = row(compute_stats(result, blk, -1, padding=True), 0, 3)
    assert whole["max"] == pytest.approx(float((raw / raw.sum(-1, keepdims=True)).max(-1).mean()), rel=1e-9)


def test_the_caption_says_the_cut_and_the_decoders_own_tokens_are_whole(demo):
    result, clip = demo
    cross = block(result, "decoder", "cross")
    said = stats_caption(result, cross)
    assert said.startswith(cross.name) and f"the clip: frames 0–{clip - 1} of 200 (padding cut)" in said
    assert "rescaled" in said
    assert stats_caption(result, cross, padding=True) == cross.name
    dec = block(result, "decoder", "self")
    assert stats_caption(result, dec) == dec.name  # the transcript's tokens are no frames
    raw = np.asarray(dec.layer(0), np.float64)[1]
    assert row(compute_stats(result, dec, -1), 0, 1)["max"] == pytest.approx(
        float((raw / raw.sum(-1, keepdims=True)).max(-1).mean()), rel=1e-9
    )


def test_open_padding_is_read_by_the_head_stats_tab():
    """`open --view stats --padding` draws the table over the whole window: no note that the tab ignores it, and the
    note of a tab that does ignore it names Head stats among its readers (figure draws no table: its views stay)."""
    from attnviz.core.view_flags import BY_DEST, unread_note

    assert unread_note("stats", ["padding"], window=True) is None
    assert "Head stats" in (unread_note("audio", ["padding"], window=True) or "")
    assert "stats" not in BY_DEST["padding"].views
