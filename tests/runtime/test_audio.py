"""Audio in, numpy only: log-mel features equal transformers' WhisperFeatureExtractor, sound files read through
soundfile (mixed down, resampled), bad clips refused in one line; Whisper's forced prompt from its configs."""

import json

import numpy as np
import pytest

from attnviz import AttnvizError
from attnviz.runtime import audio as au
from attnviz.runtime.speech import from_configs

sf = pytest.importorskip("soundfile")
RATE = 16000


def chirp(seconds=3.3, rate=RATE, f0=100.0, f1=4000.0):
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * (f0 * t + (f1 - f0) / (2 * seconds) * t**2))).astype(np.float32)


@pytest.mark.parametrize("kw", [{}, {"feature_size": 128}, {"chunk_length": 5}, {"hop_length": 200, "n_fft": 512}])
def test_features_equal_the_whisper_feature_extractor(kw):
    transformers = pytest.importorskip("transformers")
    fe = transformers.WhisperFeatureExtractor(**kw)
    spec = au.FeatureSpec.from_dict(json.loads(fe.to_json_string()))  # what preprocessor_config.json holds
    noise = np.random.default_rng(0).normal(0, 0.1, int(1.7 * RATE)).astype(np.float32)
    clips = [chirp(), noise]
    want = fe(clips, sampling_rate=RATE, return_tensors="np").input_features
    got = au.log_mel(clips, spec)
    assert got.shape == want.shape == (2, fe.feature_size, fe.nb_max_frames) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=1e-4)
    # the Slaney filter bank itself, as transformers' audio_utils builds it
    np.testing.assert_allclose(spec.filters(), fe.mel_filters, atol=1e-12)


def test_a_config_carrying_its_mel_filters_uses_them():
    """The Hub's Whisper configs carry ``mel_filters``; a bank that differs from the computed one is used."""
    filters = np.random.default_rng(1).random((201, 80)) * 0.01
    spec = au.FeatureSpec.from_dict({"chunk_length": 5, "mel_filters": filters.tolist()})
    x = chirp(2.0)
    frames = np.abs(np.fft.rfft(np.pad(au.fit_window(x, spec), 200, mode="reflect")[:400] * np.hanning(401)[:-1]))
    first = np.log10(np.maximum(filters.T @ frames**2, 1e-10))  # frame 0 by hand, before the clamp and scaling
    got = au.log_mel([x], spec)[0, :, 0] * 4 - 4
    full = au.log_mel([x], spec)[0] * 4 - 4
    np.testing.assert_allclose(got, np.maximum(first, full.max() - 8), atol=1e-5)
    with pytest.raises(AttnvizError, match="mel_filters has shape"):
        au.FeatureSpec.from_dict({"mel_filters": [[0.0] * 3]})
    with pytest.raises(AttnvizError, match="Speech2TextFeatureExtractor features are not computed here"):
        au.FeatureSpec.from_dict({"feature_extractor_type": "Speech2TextFeatureExtractor", "feature_size": 80})


@pytest.mark.parametrize(("rate", "target"), [(44100, 16000), (8000, 16000), (48000, 16000)])
def test_resampling_keeps_a_tone_below_both_nyquists(rate, target):
    """Two tones sampled at one rate, resampled, equal the same tones sampled at the other (away from the
    clip's ends, where the FFT resampler treats the clip as periodic)."""

    def tones(r, n_seconds=1.0):
        t = np.arange(int(n_seconds * r)) / r
        return 0.4 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * 3000 * t + 0.3)

    got = au.resample(tones(rate), rate, target)
    want = tones(target)
    assert len(got) == len(want)
    edge = target // 20
    np.testing.assert_allclose(got[edge:-edge], want[edge:-edge], atol=2e-3)


def test_sound_files_mixed_down_resampled_and_refused(tmp_path):
    spec = au.FeatureSpec()  # Whisper's 30 s window at 16 kHz
    left, right = chirp(2.0, 22050), 0.25 * chirp(2.0, 22050, 300.0, 900.0)
    stereo = tmp_path / "stereo.flac"
    sf.write(stereo, np.stack([left, right], axis=1), 22050, subtype="PCM_24")
    wave, notes = au.load_audio(stereo, spec)
    held, _ = sf.read(stereo, dtype="float32")
    np.testing.assert_allclose(wave, au.resample(held.mean(axis=1), 22050, RATE), atol=1e-6)
    assert any("2 channels mixed down" in n for n in notes) and any("22050 Hz to 16000 Hz" in n for n in notes)
    ogg = tmp_path / "tone.ogg"
    sf.write(ogg, chirp(1.0), RATE, format="OGG", subtype="VORBIS")
    wave, notes = au.load_audio(ogg, spec)
    assert len(wave) == RATE and notes == [] and np.abs(wave).max() > 0.3

    def refused(path, *words, param="audio", **kw):
        with pytest.raises(AttnvizError) as e:
            au.load_audio(path, spec, **kw)
        line = str(e.value)
        assert "\n" not in line and all(w in line for w in words), line
        assert e.value.param == param

    long = tmp_path / "long.wav"
    sf.write(long, np.tile(chirp(1.0), 31), RATE)
    # the fix is the setting that cuts it (the window frames its field, the CLI names its flag)
    refused(long, "long.wav", "31.00 s", "at most 30 s", "give --max-seconds 30", param="max_seconds")
    wave, notes = au.load_audio(long, spec, max_seconds=30)
    assert len(wave) == 30 * RATE and "cut to the first 30 s" in notes[0]
    silent = tmp_path / "silent.wav"
    sf.write(silent, np.zeros(RATE, np.float32), RATE)
    refused(silent, "silent.wav", "silent")
    empty = tmp_path / "empty.wav"
    sf.write(empty, np.zeros(0, np.float32), RATE)
    refused(empty, "empty.wav", "no samples")
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"\x00\x01not a sound file" * 64)
    refused(junk, "junk.wav", "not a readable sound file")
    with pytest.raises(AttnvizError, match="no such file"):
        au.load_audio(tmp_path / "missing.wav", spec)


def test_frames_are_labelled_by_time():
    spec = au.FeatureSpec()
    assert spec.frame_seconds == pytest.approx(0.02) and au.encoder_positions(spec) == 1500
    labels = au.frame_labels(au.encoder_positions(spec), spec)
    assert labels[:3] == ["0.00 s", "0.02 s", "0.04 s"] and labels[-1] == "29.98 s"


def test_the_forced_prompt_as_transformers_builds_it():
    """transformers' WhisperGenerationMixin._retrieve_init_tokens, by hand on the configs the Hub ships."""
    ids = dict(lang_to_id={"<|en|>": 50259, "<|de|>": 50261}, task_to_id={"translate": 50359, "transcribe": 50360})
    gen = dict(decoder_start_token_id=50258, no_timestamps_token_id=50364, **ids)
    # the legacy forced ids, language given: taken as they are, <|notimestamps|> already last
    p = from_configs(dict(gen, forced_decoder_ids=[[1, 50259], [2, 50360], [3, 50364]]), {})
    assert p.ids == (50258, 50259, 50360, 50364) and p.language_slot is None
    # a multilingual checkpoint: the language left open (detected per clip), transcribe, then no timestamps
    p = from_configs(dict(gen, forced_decoder_ids=[[1, None], [2, 50360]]), {})
    assert p.ids == (50258, None, 50360, 50364) and p.language_slot == 1 and set(p.languages) == {50259, 50261}
    logits = np.zeros((2, 50400))
    logits[0, 50261] = logits[1, 50259] = 5.0  # row 0 hears German, row 1 English
    logits[:, 100] = 9.0  # a likelier word is no language: only language tokens compete
    rows = p.rows(lambda start: logits if start == [50258] else None, 2)
    assert rows == [[50258, 50261, 50360, 50364], [50258, 50259, 50360, 50364]]
    # language and task set: the forced ids are ignored
    p = from_configs(dict(gen, language="de", task="translate", forced_decoder_ids=[[1, 50259]]), {})
    assert p.ids == (50258, 50261, 50359, 50364)
    # language alone: transcribe by default
    assert from_configs(dict(gen, language="<|en|>"), {}).ids == (50258, 50259, 50360, 50364)
    # an English-only checkpoint (no languages): its forced <|notimestamps|> and nothing to detect
    en = {"decoder_start_token_id": 50257, "no_timestamps_token_id": 50362, "forced_decoder_ids": [[1, 50362]]}
    p = from_configs(en, {})
    assert p.ids == (50257, 50362) and p.language_slot is None
    assert from_configs({}, {"decoder_start_token_id": 2}).ids == (2,)  # no Whisper keys: the start token alone
    assert from_configs({}, {}) is None
    with pytest.raises(AttnvizError, match="language 'xx'"):
        from_configs(dict(gen, language="xx"), {})
