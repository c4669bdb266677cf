"""The Audio regions view model (core/audio_view.py), without Qt: its curve is the selected head's (or the
aggregate's) row of the result's maps, its frames are 20 ms apart, a click time maps to the frame under it, and its
word strip, waveform envelope and spectrogram are the result's own numbers."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.core import audio_view as av
from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult, AudioTrack, DenseMap, SiteInfo, TokenAxis
from attnviz.runtime.audio import FeatureSpec, encoder_positions, frame_labels, log_mel

RATE = 16000
SPEC = FeatureSpec(chunk_length=1, n_samples=RATE)  # a 1 s window: 100 mel frames, 50 encoder positions
PROMPT = ["<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"]
WORDS = ["hello", "big", "world"]


def softmax(rng, *shape):
    x = np.exp(rng.normal(0, 2, shape))
    return (x / x.sum(-1, keepdims=True)).astype(np.float32)


def speech_result(seconds=0.73, batch=1, generated=False) -> AttentionResult:
    """A Whisper-shaped result: 2 encoder layers over the frames, decoder self and cross over a teacher-forced
    transcript (the prompt, then three words) or over generated words."""
    rng = np.random.default_rng(3)
    n = encoder_positions(SPEC)
    dec = PROMPT + (WORDS[:-1] if generated else WORDS)  # a generated last word is never fed back
    t = len(dec)
    maps, sites = [], []
    for stack, kind, tq, tk in (("encoder", "self", n, n), ("decoder", "self", t, t), ("decoder", "cross", t, n)):
        for layer in range(2):
            maps.append(DenseMap(softmax(rng, batch, 3, tq, tk)))
            sites.append(SiteInfo(stack, kind, layer, 3, f"/{stack}/{kind}/{layer}", "softmax"))
    waves = [(0.4 * np.sin(2 * np.pi * 440 * np.arange(int(seconds * RATE)) / RATE)).astype(np.float32)] * batch
    track = AudioTrack(waves, log_mel(waves, SPEC), SPEC.sampling_rate, SPEC.hop_length, SPEC.frame_seconds)
    return AttentionResult(
        maps,
        sites,
        tokens=TokenAxis(frame_labels(n, SPEC)),
        key_tokens=TokenAxis(dec, [True] * 4 + [False] * (t - 4)),
        audio=track,
        generated=WORDS if generated else [],
        prompt_len=4 if generated else t,
    )


def test_the_curve_is_the_selected_heads_cross_attention_row():
    r = speech_result()
    blocks = r.blocks()
    cross = [b.kind for b in blocks].index("cross")
    # the word "big" sits at decoder position 5 and was chosen (forced) by the row before it
    sel = vm.Selection(block=cross, mode="head", layer=1, head=2, query=4)
    v = av.audio_view(r, sel)
    n = int(np.ceil(0.73 / 0.02))  # the frames that hold the clip: 37 of the window's 50
    assert v.query_kind == "word" and v.query_label == "big" and v.block_index == cross
    np.testing.assert_array_equal(v.curve, r.maps[5].array()[0, 2, 4, :n])
    assert v.padding_mass == pytest.approx(float(r.maps[5].array()[0, 2, 4, n:].sum()), rel=1e-6)
    assert v.vmax == pytest.approx(float(v.curve.max()))
    np.testing.assert_allclose(v.heat, v.curve / v.curve.max(), rtol=1e-6)
    # an aggregate: the mean over layer 0's heads
    mean = av.audio_view(r, sel.with_(mode="mean", layer_lo=0, layer_hi=0))
    np.testing.assert_allclose(mean.curve, r.maps[4].array()[0, :, 4, :n].mean(axis=0), rtol=1e-6)
    assert "layer 0 · mean over heads" in mean.title and mean.title.endswith("query “big”")


def test_frames_are_20_ms_steps_and_a_click_time_maps_to_its_frame():
    r = speech_result()
    v = av.audio_view(r, vm.Selection(block=2))
    assert v.frame_seconds == pytest.approx(0.02) and len(v.times) == 37
    np.testing.assert_allclose(v.times, [0.02 * k for k in range(37)])
    assert v.duration == pytest.approx(0.73) and v.spec_seconds == pytest.approx(0.74)  # 74 mel frames of 10 ms
    assert [av.frame_at(t, 0.02, 37) for t in (0.0, 0.019, 0.02, 0.031, 0.7399)] == [0, 0, 1, 1, 36]
    assert [av.frame_at(t, 0.02, 37) for t in (-0.001, 0.74, 3.0, float("nan"))] == [None] * 4


def test_a_frame_query_shows_the_encoders_self_attention_row():
    r = speech_result()
    enc = 0
    v = av.audio_view(r, vm.Selection(block=enc, mode="head", layer=0, head=1, query=12))
    assert v.query_kind == "frame" and v.query_label == "frame 12 (0.24 s)"
    np.testing.assert_array_equal(v.curve, r.maps[0].array()[0, 1, 12, :37])
    assert v.query_span == pytest.approx((0.24, 0.26))
    # the encoder block without a frame chosen: the view opens on the words
    assert av.audio_view(r, vm.Selection(block=enc)).query_kind == "word"
    # rollout over the encoder's layers is defined (square maps); over cross-attention it falls back to the mean
    roll = av.audio_view(r, vm.Selection(block=enc, mode="rollout", query=3))
    assert "rollout" in roll.title


def test_the_word_strip_leaves_out_the_prompt_and_follows_the_rows_rule():
    r = speech_result()
    cross = 2
    v = av.audio_view(r, vm.Selection(block=cross))
    assert v.words == [("hello", 3), ("big", 4), ("world", 5)]
    assert v.query == 3 and v.query_label == "hello"  # the first word by default
    g = speech_result(generated=True)
    gv = av.audio_view(g, vm.Selection(block=cross, step=2))
    assert gv.words == [("hello", 3), ("big", 4), ("world", 5)] and gv.query_label == "world"


def test_the_waveform_envelope_and_the_spectrogram_are_the_clips_numbers():
    r = speech_result()
    v = av.audio_view(r, vm.Selection(block=2))
    wave = r.audio.waves[0]
    assert len(v.env_times) == av.ENVELOPE_BINS
    starts = (np.arange(av.ENVELOPE_BINS) * len(wave)) // av.ENVELOPE_BINS
    k = 123
    chunk = wave[starts[k] : starts[k + 1]]
    assert (v.env_lo[k], v.env_hi[k], v.env_times[k]) == (chunk.min(), chunk.max(), starts[k] / RATE)
    feats = r.audio.features[0][:, :74]
    assert v.spec.shape == (80, 74)
    loud = np.unravel_index(np.argmax(feats), feats.shape)
    quiet = np.unravel_index(np.argmin(feats), feats.shape)
    assert v.spec[loud] == pytest.approx(av.SPEC_FLOOR) and v.spec[quiet] == pytest.approx(1.0)


def test_a_result_without_sound_is_one_line():
    r = speech_result()
    r.audio = None
    with pytest.raises(vm.ViewError, match="Audio regions need a speech model"):
        av.audio_view(r, vm.Selection())


def test_word_spans_come_from_the_result_and_bad_entries_are_skipped():
    r = speech_result()
    r.info["word_times"] = [["hello", 0.1, 0.3], ["big", 0.3, "x"], ["world", 0.5, 0.4], ["big", 0.3, 0.45]]
    assert av.audio_view(r, vm.Selection(block=2)).spans == (
        av.WordSpan("hello", 0.1, 0.3),
        av.WordSpan("big", 0.3, 0.45),
    )


def test_the_sound_survives_an_npz_round_trip(tmp_path):
    from attnviz.core.io import load_npz, save_npz

    r = speech_result(batch=2)
    r.audio.waves[1] = r.audio.waves[1][:5000]  # clips of different lengths
    back = load_npz(save_npz(r, tmp_path / "speech.npz"))
    assert [len(w) for w in back.audio.waves] == [len(w) for w in r.audio.waves]
    for a, b in zip(back.audio.waves, r.audio.waves):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(back.audio.features, r.audio.features)
    assert (back.audio.rate, back.audio.hop, back.audio.frame_seconds) == (16000, 160, 0.02)
    sel = vm.Selection(block=2, batch=1)
    np.testing.assert_array_equal(av.audio_view(back, sel).curve, av.audio_view(r, sel).curve)
    assert av.audio_view(back, sel).duration == pytest.approx(5000 / RATE)


def test_an_encoder_alone_on_raw_samples_is_drawn_by_its_frames():
    """A wav2vec2-like result (runtime/waveform.py: no decoder, frames 5 ms apart from a HuBERT-like conv stack):
    the view draws the encoder's self-attention with a frame as the query, no word strip, and a spectrogram that
    covers the frames shown (a 5 ms frame is half a 10 ms mel frame: rounded up, not down to nothing)."""
    from attnviz.runtime.waveform import WaveSpec

    spec = WaveSpec(conv_kernel=(10, 8, 4), conv_stride=(5, 4, 4))
    rng = np.random.default_rng(4)
    wave = (0.3 * np.sin(2 * np.pi * 300 * np.arange(4000) / RATE)).astype(np.float32)  # 0.25 s
    n = spec.positions(len(wave))
    r = AttentionResult(
        [DenseMap(softmax(rng, 1, 2, n, n)) for _ in range(2)],
        [SiteInfo("encoder", "self", layer, 2, f"/e/{layer}", "softmax") for layer in range(2)],
        tokens=TokenAxis(frame_labels(n, spec), values=spec.levels(wave, n)),
        audio=AudioTrack([wave], spec.display([wave]), spec.sampling_rate, spec.hop_length, spec.frame_seconds),
    )
    assert av.audio_blocks(r, r.blocks()) == (None, 0)
    v = av.audio_view(r, vm.Selection(block=0, mode="head", layer=1, head=1, query=7))
    shown = int(np.ceil(0.25 / 0.005))  # frames within the clip (n = 49: the last one's 6.6 ms ran past it)
    assert v.query_kind == "frame" and v.words == [] and len(v.curve) == min(n, shown) == n
    np.testing.assert_array_equal(v.curve, r.maps[1].array()[0, 1, 7, :n])
    assert v.query_span == pytest.approx((0.035, 0.04))
    assert v.spec.shape[1] == int(np.ceil(n * 0.5)) and v.spec_seconds == pytest.approx(np.ceil(n * 0.5) * 0.01)
    assert v.padding_mass is None  # its keys end with the clip: no padding to weigh (it said "padding: 0.00")
