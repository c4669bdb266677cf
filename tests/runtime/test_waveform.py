"""The raw-sample feature extractor (runtime/waveform.py) against transformers' own and by hand: frame counts and
times of a conv stack, normalisation, padding and mask, and bad preprocessor / config values in one line."""

import numpy as np
import pytest

from attnviz import AttnvizError
from attnviz.runtime.audio import frame_labels
from attnviz.runtime.audio_specs import audio_spec
from attnviz.runtime.waveform import WaveSpec


@pytest.mark.parametrize(
    ("kernel", "stride", "hop", "seen"),
    [((10, 3, 3, 3, 3, 2, 2), (5, 2, 2, 2, 2, 2, 2), 320, 400), ((10, 8, 4), (5, 4, 4), 80, 105)],
)
def test_frames_by_hand(kernel, stride, hop, seen):
    """The receptive field and spacing by hand (wav2vec2-base's 25 ms / 20 ms); the count as each conv layer's
    (n - k) // s + 1, checked by sliding: a frame exists where its receptive field fits in the clip."""
    spec = WaveSpec(conv_kernel=kernel, conv_stride=stride)
    assert (spec.hop, spec.receptive_samples) == (hop, seen)
    for n in (seen - 1, seen, seen + hop - 1, seen + hop, 16000, 20801):
        assert spec.positions(n) == max(0, (n - seen) // hop + 1)


def test_features_equal_the_extractor():
    transformers = pytest.importorskip("transformers")
    rng = np.random.default_rng(0)
    clips = [rng.normal(0.3, 0.2, 5000).astype(np.float32), rng.normal(-0.1, 0.5, 3210).astype(np.float32)]
    for flag in (True, False):
        fe = transformers.Wav2Vec2FeatureExtractor(return_attention_mask=True, do_normalize=flag, padding_value=0.0)
        want = fe(clips, sampling_rate=16000, padding=True, return_tensors="np")
        values, mask = audio_spec(fe.to_dict() | {"feature_extractor_type": "Wav2Vec2FeatureExtractor"}).encode(clips)
        np.testing.assert_allclose(values, want["input_values"], atol=2e-6)
        assert (mask == want["attention_mask"]).all()


def test_labels_and_round_trip():
    spec = audio_spec(
        {"feature_extractor_type": "Wav2Vec2FeatureExtractor", "conv_stride": [5, 4, 4], "conv_kernel": [10, 8, 4]}
    )
    assert frame_labels(3, spec) == ["0.000 s", "0.005 s", "0.010 s"]  # 5 ms apart: milliseconds shown
    assert frame_labels(2, WaveSpec()) == ["0.00 s", "0.02 s"]
    import dataclasses
    import json

    assert audio_spec(json.loads(json.dumps(dataclasses.asdict(spec)))) == spec  # meta["audio"] through JSON


@pytest.mark.parametrize(
    ("d", "words"),
    [
        ({"conv_kernel": [10, 3], "conv_stride": [5]}, "conv_kernel has 2 layers and conv_stride 1"),
        ({"conv_stride": [5, 0]}, "conv_stride is [5, 0]"),
        ({"conv_kernel": "10"}, "conv_kernel is '10'"),
        ({"sampling_rate": -1}, "sampling_rate is -1"),
        ({"do_normalize": "yes"}, "do_normalize is 'yes'"),
        ({"padding_value": float("nan")}, "padding_value is nan"),
        ({"feature_extractor_type": "SeamlessM4TFeatureExtractor"}, "SeamlessM4TFeatureExtractor features are not"),
    ],
)
def test_bad_values_in_one_line(d, words):
    with pytest.raises(AttnvizError, match=words.replace("[", r"\[").replace("]", r"\]")):
        audio_spec({"feature_extractor_type": "Wav2Vec2FeatureExtractor", **d})
