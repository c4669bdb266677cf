"""The spoken-digits synthesizer: its segment times are where the sound is (measured from the samples alone), its
digits are the tones its table names (an FFT of each segment), and its splits are fixed and apart."""

import numpy as np
import pytest

from attnviz.training import data_speech as ds

HOP = 160  # 10 ms frames at 16 kHz


def frame_rms(wave):
    n = len(wave) // HOP
    return np.sqrt((wave[: n * HOP].reshape(n, HOP) ** 2).mean(1))


@pytest.fixture(scope="module")
def clips():
    return ds.make_clips(60, 123)


def test_segments_are_where_the_energy_is(clips):
    """Every 10 ms frame wholly inside a segment is loud, every frame at least 10 ms from all segments is near the
    noise floor: the times are read back from the waveform, not from the synthesizer's bookkeeping."""
    for c in clips:
        rms = frame_rms(c.wave)
        t0 = np.arange(len(rms)) * HOP / ds.RATE
        t1 = t0 + HOP / ds.RATE
        inside = np.zeros(len(rms), bool)
        near = np.zeros(len(rms), bool)
        for s in c.segments:
            inside |= (t0 >= s.start + ds.RAMP) & (t1 <= s.end - ds.RAMP)  # past the attack, before the decay
            near |= (t1 > s.start - 0.01) & (t0 < s.end + 0.01)
        assert inside.any() and (~near).any()
        assert rms[inside].min() > 8 * rms[~near].max(), c.transcript


def test_segments_are_ordered_apart_and_fit_the_window(clips):
    for c in clips:
        assert ds.MIN_DIGITS <= len(c.segments) <= ds.MAX_DIGITS
        assert len(c.wave) <= ds.MAX_SECONDS * ds.RATE and c.wave.dtype == np.float32
        for s in c.segments:
            assert ds.DURATION[0] - 1e-3 <= s.end - s.start <= ds.DURATION[1] + 1e-3
        for a, b in zip(c.segments, c.segments[1:]):
            assert b.start > a.end  # a gap between every two digits
        assert c.segments[-1].end < len(c.wave) / ds.RATE


def test_each_segment_sounds_its_digits_low_tone(clips):
    """The strongest spectral peak below 1 kHz of a segment lies within the digit's low tone (its start..end glide,
    the per-utterance pitch factor of 0.95-1.05 allowed): the transcript says what is heard."""
    for c in clips[:20]:
        for s in c.segments:
            x = c.wave[int(s.start * ds.RATE) : int(s.end * ds.RATE)]
            spec = np.abs(np.fft.rfft(x * np.hanning(len(x)), 1 << 15))
            freqs = np.fft.rfftfreq(1 << 15, 1 / ds.RATE)
            low = freqs < 1000
            peak = freqs[low][np.argmax(spec[low])]
            f0, f1 = ds.TONES[s.digit][0]
            assert 0.93 * min(f0, f1) <= peak <= 1.07 * max(f0, f1), (s.digit, peak)


def test_splits_are_deterministic_and_apart():
    from attnviz.training.speech_digits import split_seed

    a, b = ds.make_clips(5, split_seed("train")), ds.make_clips(5, split_seed("train"))
    assert all(np.array_equal(x.wave, y.wave) and x.segments == y.segments for x, y in zip(a, b))
    test = ds.make_clips(5, split_seed("test"))
    assert len({split_seed(s) for s in ("train", "test", "sample")}) == 3
    assert not any(np.array_equal(x.wave[:1000], y.wave[:1000]) for x in a for y in test)
