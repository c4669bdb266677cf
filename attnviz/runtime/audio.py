"""Audio in: a sound file -> the log-mel features a Whisper encoder takes, with numpy only (no torch, no
transformers at run time).

:class:`FeatureSpec` is the folder's ``preprocessor_config.json`` (what transformers' ``WhisperFeatureExtractor``
saves); :func:`log_mel` computes what that extractor computes: the clip padded / trimmed to the window
(``n_samples``), a centred STFT (reflect padding, periodic Hann window), the power spectrum, the Slaney mel filter
bank (0-8 kHz, as the extractor builds it, or the ``mel_filters`` a Hub config carries), ``log10`` floored at
1e-10, clamped to 8 below each clip's maximum, then ``(x + 4) / 4``.  :func:`load_audio` reads WAV / FLAC / OGG
through ``soundfile`` (libsndfile ships in its wheel), mixes stereo down and resamples to the extractor's rate.

Encoders on raw samples (wav2vec2, HuBERT, WavLM: ``Wav2Vec2FeatureExtractor``) are :class:`~attnviz.runtime.waveform.
WaveSpec`'s (:mod:`attnviz.runtime.audio_specs` picks the class by the file's ``feature_extractor_type``); both share
the reading, resampling and checks here through :class:`ClipRules` (``limit`` / ``too_long`` say what "too long"
means for each: Whisper's fixed window, a raw-sample encoder's default cap that ``--max-seconds`` moves).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd
from pathlib import Path
from typing import Protocol

import numpy as np

from attnviz import AttnvizError
from attnviz.core.setting_words import give
from attnviz.runtime.audio_notes import cut_note
from attnviz.runtime.sidecar import sidecar

PREPROCESSOR = "preprocessor_config.json"
CONV_STRIDE = 2  # Whisper's second conv layer halves the frames: one encoder position per 2 hops
SILENT = 1e-6  # peak amplitude (full scale 1.0) below which a clip holds nothing to hear
MEL_FLOOR = 1e-10
MEL_MAX_HZ = 8000.0  # WhisperFeatureExtractor's filter bank stops at 8 kHz whatever the rate
EXTRACTOR = "WhisperFeatureExtractor"  # the one feature extractor computed here
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg")  # what soundfile reads (load_audio)


class ClipRules(Protocol):
    """What reading and checking a clip needs of a feature extractor's spec (Whisper's or a raw-sample encoder's)."""

    @property
    def sampling_rate(self) -> int: ...

    @property
    def frame_seconds(self) -> float: ...

    def limit(self, max_seconds: float | None) -> float: ...

    def too_long(self, name: str, seconds: float) -> AttnvizError: ...

    def too_short(self, name: str, samples: int) -> AttnvizError | None: ...


def unknown_extractor(kind) -> AttnvizError:
    return AttnvizError(
        f"{PREPROCESSOR}: {kind} features are not computed here (only Whisper's log-mel and wav2vec2's raw "
        "samples); give the model's input with --inputs FEEDS.npz"
    )


@dataclass(frozen=True)
class FeatureSpec:
    """How a clip becomes features: what ``preprocessor_config.json`` says (Whisper's defaults where it is
    silent)."""

    feature_size: int = 80
    sampling_rate: int = 16000
    hop_length: int = 160
    n_fft: int = 400
    chunk_length: int = 30
    n_samples: int = 480000
    padding_value: float = 0.0
    mel_filters: tuple[tuple[float, ...], ...] | None = None  # [n_fft // 2 + 1][feature_size] when the file has them

    @classmethod
    def from_dict(cls, d: dict) -> FeatureSpec:
        kind = d.get("feature_extractor_type", EXTRACTOR)
        if kind != EXTRACTOR:  # Speech2Text's Kaldi filter banks, ...: other features (wav2vec2's: audio_specs)
            raise unknown_extractor(kind)

        def num(key: str, default, kind=int):
            v = d.get(key, default)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise AttnvizError(f"{PREPROCESSOR}: {key} is {v!r}; give a positive number (or remove the key)")
            return kind(v)

        base = cls()
        feature_size = num("feature_size", d.get("n_mels", base.feature_size))
        rate = num("sampling_rate", base.sampling_rate)
        chunk = num("chunk_length", base.chunk_length)
        hop = num("hop_length", base.hop_length)
        n_fft = num("n_fft", base.n_fft)
        n_samples = num("n_samples", chunk * rate)
        if min(feature_size, rate, hop, n_fft, n_samples) <= 0:
            raise AttnvizError(f"{PREPROCESSOR}: sizes and rates must be positive; fix the file")
        filters = d.get("mel_filters")
        mel = None
        if isinstance(filters, (list, tuple)) and filters:
            try:
                arr = np.asarray(filters, np.float64)
            except (ValueError, TypeError):  # rows of unequal lengths, or values that are not numbers
                arr = None
            if arr is None or arr.shape != (n_fft // 2 + 1, feature_size) or not np.isfinite(arr).all():
                got = "rows of unequal lengths or values that are not numbers" if arr is None else f"shape {arr.shape}"
                if arr is not None and arr.shape == (n_fft // 2 + 1, feature_size):
                    got = "values that are not finite"
                raise AttnvizError(
                    f"{PREPROCESSOR}: mel_filters has {got}, expected {(n_fft // 2 + 1, feature_size)} numbers "
                    "(n_fft // 2 + 1, feature_size); fix the file or remove mel_filters"
                )
            mel = tuple(tuple(float(x) for x in row) for row in arr)
        return cls(feature_size, rate, hop, n_fft, chunk, n_samples, num("padding_value", 0.0, float), mel)

    @classmethod
    def for_model(cls, model_file: Path) -> FeatureSpec | None:
        """The spec beside a model file (read only where :func:`sidecar` allows), or None when there is none."""
        from attnviz.core.untrusted import read_json

        p = sidecar(model_file, PREPROCESSOR)
        if p is None or not p.is_file():
            return None
        d = read_json(p, PREPROCESSOR, fix="fix or remove it")  # regular files only; depth and numbers checked
        return cls.from_dict(d if isinstance(d, dict) else {})

    def limit(self, max_seconds: float | None) -> float:
        """The longest clip taken: the window, whatever ``--max-seconds`` says (it only cuts)."""
        return self.seconds

    def too_long(self, name: str, seconds: float) -> AttnvizError:
        return AttnvizError(
            f"{name}: {seconds:.2f} s long; the model hears at most {self.seconds:g} s at a time: "
            f"{give('max_seconds', self.seconds)} to keep the first {self.seconds:g} s, or cut the file",
            param="max_seconds",
        )

    def too_short(self, name: str, samples: int) -> AttnvizError | None:
        return None  # a short clip is padded to the window

    def positions(self, frames: int) -> int:
        """The encoder's positions for ``frames`` log-mel frames (a clip fills the whole window's): one per
        :data:`CONV_STRIDE` frames (kernel 3, padding 1)."""
        return (frames - 1) // CONV_STRIDE + 1

    def encode(self, waves: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray | None]:
        """``(input_features, None)``: the log-mel frames (Whisper's encoder takes no mask)."""
        return log_mel(waves, self), None

    def display(self, waves: list[np.ndarray], features: np.ndarray | None = None) -> np.ndarray:
        """The spectrogram drawn under the maps: the features the encoder took."""
        return features if features is not None else log_mel(waves, self)

    @property
    def frames(self) -> int:
        """Feature frames of one window (the encoder's input length)."""
        return self.n_samples // self.hop_length

    @property
    def seconds(self) -> float:
        return self.n_samples / self.sampling_rate

    @property
    def frame_seconds(self) -> float:
        """Seconds per encoder position (after the conv stride): 20 ms for Whisper."""
        return CONV_STRIDE * self.hop_length / self.sampling_rate

    def filters(self) -> np.ndarray:
        """The mel filter bank, ``[n_fft // 2 + 1, feature_size]``."""
        if self.mel_filters is not None:
            return np.asarray(self.mel_filters, np.float64)
        return mel_filter_bank(self.n_fft // 2 + 1, self.feature_size, 0.0, MEL_MAX_HZ, self.sampling_rate)


# -- the Slaney mel scale and filter bank (librosa's, as transformers.audio_utils builds it) ----------------------
_MIN_LOG_HZ, _MIN_LOG_MEL, _LOGSTEP = 1000.0, 15.0, np.log(6.4) / 27.0


def hz_to_mel(f: np.ndarray) -> np.ndarray:
    f = np.asarray(f, np.float64)
    lin = 3.0 * f / 200.0
    return np.where(f >= _MIN_LOG_HZ, _MIN_LOG_MEL + np.log(np.maximum(f, 1e-12) / _MIN_LOG_HZ) / _LOGSTEP, lin)


def mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, np.float64)
    return np.where(m >= _MIN_LOG_MEL, _MIN_LOG_HZ * np.exp(_LOGSTEP * (m - _MIN_LOG_MEL)), 200.0 * m / 3.0)


def mel_filter_bank(n_freqs: int, n_mels: int, f_min: float, f_max: float, rate: int) -> np.ndarray:
    """Triangular filters evenly spaced on the Slaney mel scale, area-normalised ("slaney" norm)."""
    fft_freqs = np.linspace(0, rate // 2, n_freqs)
    lo, hi = hz_to_mel(np.array([f_min, f_max]))
    edges = mel_to_hz(np.linspace(lo, hi, n_mels + 2))
    diff = np.diff(edges)
    slopes = edges[None, :] - fft_freqs[:, None]
    down = -slopes[:, :-2] / diff[:-1]
    up = slopes[:, 2:] / diff[1:]
    bank = np.maximum(0.0, np.minimum(down, up))
    return bank * (2.0 / (edges[2 : n_mels + 2] - edges[:n_mels]))[None, :]


def fit_window(wave: np.ndarray, spec: FeatureSpec) -> np.ndarray:
    """A clip padded (``padding_value``) or cut to exactly one window of ``n_samples``."""
    out = np.full(spec.n_samples, spec.padding_value, np.float64)
    n = min(len(wave), spec.n_samples)
    out[:n] = wave[:n]
    return out


def log_mel(waves: list[np.ndarray] | np.ndarray, spec: FeatureSpec) -> np.ndarray:
    """Log-mel features ``[batch, feature_size, frames]`` (float32) of mono clips at ``spec.sampling_rate``."""
    rows = [waves] if isinstance(waves, np.ndarray) and waves.ndim == 1 else list(waves)
    filters = spec.filters()
    n_fft, hop = spec.n_fft, spec.hop_length
    window = np.hanning(n_fft + 1)[:-1]  # periodic Hann, as torch.hann_window and transformers' window_function
    out = []
    for w in rows:
        x = np.pad(fit_window(np.asarray(w, np.float64), spec), n_fft // 2, mode="reflect")  # centred frames
        n_frames = 1 + (len(x) - n_fft) // hop
        idx = np.arange(n_fft)[None, :] + hop * np.arange(n_frames)[:, None]
        power = np.abs(np.fft.rfft(x[idx] * window, axis=1)) ** 2  # [frames, freqs]
        mel = filters.T @ power[:-1].T  # the last frame is dropped, as Whisper drops it
        logspec = np.log10(np.maximum(mel, MEL_FLOOR))
        logspec = np.maximum(logspec, logspec.max() - 8.0)
        out.append((logspec + 4.0) / 4.0)
    return np.stack(out).astype(np.float32)


def resample(wave: np.ndarray, rate: int, target: int) -> np.ndarray:
    """Band-limited resampling by the FFT (as ``scipy.signal.resample``): the spectrum cut or zero-extended to
    the new length.  Exact for content below both Nyquist frequencies; the clip is treated as periodic, so the
    first and last milliseconds may ring slightly where it starts and ends loud."""
    if rate == target:
        return wave
    g = gcd(int(rate), int(target))
    n_out = int(round(len(wave) * (target // g) / (rate // g)))
    spectrum = np.fft.rfft(np.asarray(wave, np.float64))
    kept = np.zeros(n_out // 2 + 1, complex)
    k = min(len(spectrum), len(kept))
    kept[:k] = spectrum[:k]
    if n_out < len(wave) and n_out % 2 == 0:
        kept[-1] = kept[-1].real  # the new Nyquist bin of a real signal is real
    return np.fft.irfft(kept, n_out) * (n_out / len(wave))


def load_audio(path: str | Path, spec: ClipRules, max_seconds: float | None = None) -> tuple[np.ndarray, list[str]]:
    """A sound file as mono float samples at the extractor's rate, and notes on what was done to it, refusing
    in one line an unreadable, empty or silent file and a clip longer than the window."""
    import soundfile as sf

    from attnviz.core.untrusted import open_regular

    p = Path(path)
    notes: list[str] = []
    with open_regular(p, "audio") as f:  # regular files only: a FIFO named clip.wav must not block
        try:
            with sf.SoundFile(f) as snd:
                # The length comes from the header (libsndfile caps it at the data really there), so a long
                # clip is refused, or cut to --max-seconds, before its samples are read: an 8 h file's float
                # samples are 1.8 GB per channel, read only to be thrown away.
                rate, frames = snd.samplerate, snd.frames
                keep = _frames_to_read(p.name, rate, frames, spec, max_seconds, notes)
                data = snd.read(keep, dtype="float32", always_2d=True)
        except AttnvizError:
            raise
        except MemoryError:
            raise AttnvizError(f"{p.name}: larger than this machine's free memory; give a shorter clip") from None
        except Exception:  # libsndfile's words quote Python's file object ("Error opening <_io.BufferedReader ...")
            raise AttnvizError(
                f"{p.name}: not a readable sound file (a format libsndfile does not know, or damaged or cut short); "
                "give a WAV, FLAC or OGG file",
                param="audio",
            ) from None
    wave = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
    if data.shape[1] > 1:
        notes.append(f"{p.name}: {data.shape[1]} channels mixed down to mono")
    wave, _ = check_clip(wave, int(rate), spec, p.name, max_seconds)  # cut to max_seconds above, from the header
    if rate != spec.sampling_rate:
        wave = resample(wave, rate, spec.sampling_rate)
        notes.append(f"{p.name}: resampled from {rate} Hz to {spec.sampling_rate} Hz")
    return wave.astype(np.float32), notes


def _frames_to_read(
    name: str, rate: int, frames: int, spec: ClipRules, max_seconds: float | None, notes: list[str]
) -> int:
    """How many frames of a ``frames``-long clip at ``rate`` to read: all of it, the first ``max_seconds`` (noted),
    or none, refused in one line when it is longer than the model's window."""
    if rate <= 0:
        raise AttnvizError(f"{name}: its header gives a sample rate of {rate} Hz; re-save the recording", param="audio")
    seconds = frames / rate
    if max_seconds is not None and seconds > max_seconds:
        notes.append(cut_note(name, seconds, max_seconds))
        return int(round(max_seconds * rate))
    if seconds > spec.limit(max_seconds) + 0.5 / rate:
        raise spec.too_long(name, seconds)
    return frames


def check_clip(
    wave: np.ndarray, rate: int, spec: ClipRules, name: str, max_seconds: float | None = None
) -> tuple[np.ndarray, list[str]]:
    """A mono clip cut to ``max_seconds`` when given, refused in one line when empty, silent, not finite or
    longer than the model's window (Whisper hears 30 s; transformers would silently drop the rest)."""
    wave = np.asarray(wave)
    if wave.ndim != 1:
        raise AttnvizError(f"{name}: samples of shape {wave.shape}; give one mono clip (1-D samples)", param="audio")
    notes = []
    seconds = len(wave) / rate
    if max_seconds is not None and seconds > max_seconds:
        wave = wave[: int(round(max_seconds * rate))]
        notes.append(cut_note(name, seconds, max_seconds))
        seconds = len(wave) / rate
    if len(wave) == 0:
        raise AttnvizError(f"{name}: holds no samples; give a recording", param="audio")
    if not np.isfinite(wave).all():
        raise AttnvizError(f"{name}: holds NaN or infinite samples; give a clean recording", param="audio")
    if float(np.max(np.abs(wave))) < SILENT:
        raise AttnvizError(f"{name}: is silent (every sample is 0); give a recording with sound in it", param="audio")
    if seconds > spec.limit(max_seconds) + 0.5 / rate:
        raise spec.too_long(name, seconds)
    short = spec.too_short(name, int(round(seconds * spec.sampling_rate)))
    if short is not None:
        raise short
    return wave, notes


def encoder_positions(spec: FeatureSpec) -> int:
    """Encoder positions of one window: the frames after the stride-2 conv (kernel 3, padding 1)."""
    return (spec.frames - 1) // CONV_STRIDE + 1


def frame_labels(n: int, spec: ClipRules) -> list[str]:
    """The times of ``n`` encoder positions (frame i starts at i x its spacing: 2 hops for Whisper, the conv
    strides' product for a raw-sample encoder), to the millisecond where the spacing needs it (HuBERT-like stacks
    of 5 ms frames would repeat labels at 10 ms)."""
    step = spec.frame_seconds
    digits = 2 if abs(step * 100 - round(step * 100)) < 1e-9 else 3
    return [f"{i * step:.{digits}f} s" for i in range(n)]
