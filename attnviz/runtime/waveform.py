"""Speech encoders on raw samples (wav2vec2, HuBERT, WavLM, data2vec-audio): the samples they take and the times
of their positions, with numpy only (no torch, no transformers at run time).

:class:`WaveSpec` is the folder's ``preprocessor_config.json`` as transformers' ``Wav2Vec2FeatureExtractor`` saves
it (16 kHz mono samples, ``do_normalize``, ``padding_value``, ``return_attention_mask``) and the conv feature
encoder's ``conv_kernel`` / ``conv_stride`` from ``config.json``: its positions are the conv stack's output frames,
one every ``prod(conv_stride)`` samples (320 = 20 ms with wav2vec2's defaults), each seeing
``receptive_samples`` of the clip (400 = 25 ms).  :meth:`WaveSpec.encode` computes what the extractor computes: each
clip zero-mean unit-variance on its own samples (``(x - mean) / sqrt(var + 1e-7)``, transformers' formula), padded
to the longest with ``padding_value``, and the attention mask (1 on samples, 0 on padding).

Such a model has no window: it takes a clip of any length, but its maps hold ``T x T`` weights per head and layer
(T = 50 frames a second): a clip longer than :data:`DEFAULT_SECONDS` is refused unless ``--max-seconds`` says how
much to take (the run's memory check then judges what fits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import AttentionResult, TokenAxis
from attnviz.core.setting_words import again, give
from attnviz.runtime.audio import PREPROCESSOR, FeatureSpec, log_mel

EXTRACTOR = "Wav2Vec2FeatureExtractor"
NORM_EPS = 1e-7  # Wav2Vec2FeatureExtractor.zero_mean_unit_var_norm's
DEFAULT_SECONDS = (
    30.0  # a 30 s clip: 1,499 frames, 9 MB of float32 weights per head and layer (1.3 GB for a base's 144)
)
WAV2VEC2_KERNELS = (10, 3, 3, 3, 3, 2, 2)  # Wav2Vec2Config's (HuBERT's, WavLM's, data2vec-audio's alike)
WAV2VEC2_STRIDES = (5, 2, 2, 2, 2, 2, 2)
FLOOR_DB = -80.0  # the level of digital silence (and of the padding after a shorter clip)
DISPLAY_HOP = 160  # the spectrogram drawn under the maps: Whisper's 10 ms log-mel hop (display only)


def _ints(v, key: str, default: tuple[int, ...]) -> tuple[int, ...]:
    if v is None:
        return default
    if (
        not isinstance(v, (list, tuple))
        or not v
        or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v)
    ):
        raise AttnvizError(f"config.json: {key} is {v!r}; give a list of positive integers (or remove the key)")
    return tuple(int(x) for x in v)


@dataclass(frozen=True)
class WaveSpec:
    """How a clip becomes a raw-sample encoder's input, and how its positions map to time."""

    feature_extractor_type: str = EXTRACTOR  # kept so that ``dataclasses.asdict`` round-trips through the registry
    sampling_rate: int = 16000
    padding_value: float = 0.0
    do_normalize: bool = True
    return_attention_mask: bool = False
    conv_kernel: tuple[int, ...] = WAV2VEC2_KERNELS
    conv_stride: tuple[int, ...] = WAV2VEC2_STRIDES
    seconds: float = DEFAULT_SECONDS  # the longest clip taken without --max-seconds

    @classmethod
    def from_dict(cls, d: dict) -> WaveSpec:
        """From ``preprocessor_config.json`` (with ``config.json``'s conv keys merged in), or from ``asdict``."""
        rate = d.get("sampling_rate", 16000)
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0 or rate != int(rate):
            raise AttnvizError(
                f"{PREPROCESSOR}: sampling_rate is {rate!r}; give a positive whole number (or remove it)"
            )
        pad = d.get("padding_value", 0.0)
        if isinstance(pad, bool) or not isinstance(pad, (int, float)) or not math.isfinite(pad):
            raise AttnvizError(f"{PREPROCESSOR}: padding_value is {pad!r}; give a number (or remove the key)")
        flags = {}
        for key, default in (("do_normalize", True), ("return_attention_mask", False)):
            v = d.get(key, default)
            if not isinstance(v, bool):
                raise AttnvizError(f"{PREPROCESSOR}: {key} is {v!r}; give true or false (or remove the key)")
            flags[key] = v
        kernel = _ints(d.get("conv_kernel"), "conv_kernel", WAV2VEC2_KERNELS)
        stride = _ints(d.get("conv_stride"), "conv_stride", WAV2VEC2_STRIDES)
        if len(kernel) != len(stride):
            raise AttnvizError(
                f"config.json: conv_kernel has {len(kernel)} layers and conv_stride {len(stride)}; give one kernel "
                "and one stride per conv layer"
            )
        seconds = d.get("seconds", DEFAULT_SECONDS)
        seconds = float(seconds) if isinstance(seconds, (int, float)) and seconds > 0 else DEFAULT_SECONDS
        return cls(EXTRACTOR, int(rate), float(pad), conv_kernel=kernel, conv_stride=stride, seconds=seconds, **flags)

    # -- the conv stack's frames ---------------------------------------------------
    @property
    def hop(self) -> int:
        """Samples between two positions: the strides' product (320 with the defaults)."""
        return math.prod(self.conv_stride)

    @property
    def receptive_samples(self) -> int:
        """Samples one position sees: the first kernel, widened by each later one at its input's spacing."""
        seen, spacing = 0, 1
        for k, s in zip(self.conv_kernel, self.conv_stride):
            seen += (k - 1) * spacing
            spacing *= s
        return seen + 1

    @property
    def frame_seconds(self) -> float:
        return self.hop / self.sampling_rate

    @property
    def receptive_seconds(self) -> float:
        return self.receptive_samples / self.sampling_rate

    @property
    def hop_length(self) -> int:
        """The hop of the log-mel spectrogram drawn under the maps (not the model's input)."""
        return DISPLAY_HOP

    def positions(self, samples: int) -> int:
        """The encoder's positions for a clip of ``samples``: each conv layer's ``(n - kernel) // stride + 1``, as
        transformers' ``_get_feat_extract_output_lengths`` (0 when the clip is shorter than one receptive field)."""
        n = samples
        for k, s in zip(self.conv_kernel, self.conv_stride):
            n = (n - k) // s + 1 if n >= k else 0
        return max(n, 0)

    def describe(self) -> dict:
        """What ``inspect`` says of the model's hearing."""
        return {
            "extractor": self.feature_extractor_type,
            "sampling_rate": self.sampling_rate,
            "seconds": self.seconds,
            "frame_seconds": self.frame_seconds,
            "receptive_seconds": self.receptive_seconds,
            "do_normalize": self.do_normalize,
            "return_attention_mask": self.return_attention_mask,
        }

    # -- how long a clip may be ----------------------------------------------------
    def limit(self, max_seconds: float | None) -> float:
        """The longest clip taken: ``--max-seconds`` when given (the model has no window), else the default cap."""
        return max_seconds if max_seconds is not None else self.seconds

    def too_long(self, name: str, seconds: float) -> AttnvizError:
        frames = self.positions(int(seconds * self.sampling_rate))
        return AttnvizError(
            f"{name}: {seconds:.2f} s long ({frames} frames of {self.frame_seconds * 1000:g} ms; each map holds "
            f"frames x frames weights per head and layer): {give('max_seconds', self.seconds)} to keep the first "
            f"{self.seconds:g} s, or {again('max_seconds', math.ceil(seconds))} to take it all",
            param="max_seconds",
        )

    def too_short(self, name: str, samples: int) -> AttnvizError | None:
        if self.positions(samples) > 0:
            return None
        ms = self.receptive_seconds * 1000
        return AttnvizError(
            f"{name}: {samples / self.sampling_rate * 1000:.1f} ms long, shorter than one frame of the model's "
            f"conv encoder ({ms:g} ms); give a longer clip",
            param="audio",
        )

    def levels(self, wave: np.ndarray, n: int) -> list[float]:
        """The loudness each of ``n`` frames hears (dBFS: the RMS of its receptive field, floored at
        :data:`FLOOR_DB`), drawn above the maps on the frames' columns; frames past the clip (a shorter clip in a
        padded batch) are at the floor."""
        x = np.asarray(wave, np.float64)
        cs = np.concatenate([[0.0], np.cumsum(x * x)])
        start = np.minimum(np.arange(n) * self.hop, len(x))
        end = np.minimum(start + self.receptive_samples, len(x))
        power = (cs[end] - cs[start]) / self.receptive_samples
        return (10 * np.log10(np.maximum(power, 10 ** (FLOOR_DB / 10)))).round(2).tolist()

    # -- the model's input -----------------------------------------------------------
    def encode(self, waves: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """``(input_values [batch, samples] float32, attention_mask [batch, samples] int64)`` of mono clips at
        ``sampling_rate``: each normalised on its own samples when ``do_normalize`` (as the extractor does with
        its attention mask; a padded batch without one would also count the padding), padded with
        ``padding_value`` to the longest."""
        n = max(len(w) for w in waves)
        values = np.full((len(waves), n), self.padding_value, np.float32)
        mask = np.zeros((len(waves), n), np.int64)
        for i, w in enumerate(waves):
            x = np.asarray(w, np.float32)  # float32 throughout, as the extractor (its mean and var are float32's)
            if self.do_normalize:
                x = (x - x.mean()) / np.sqrt(x.var() + NORM_EPS)
            values[i, : len(x)] = x
            mask[i, : len(x)] = 1
        return values, mask

    def display(self, waves: list[np.ndarray], features: np.ndarray | None = None) -> np.ndarray:
        """A log-mel spectrogram of each clip (Whisper's, 80 bins every 10 ms, the longest clip's length) for the
        audio view: the model itself never sees it (``features``, its samples, are not one)."""
        n = max(len(w) for w in waves)
        return log_mel(list(waves), FeatureSpec(sampling_rate=self.sampling_rate, n_samples=max(n, DISPLAY_HOP)))


def frames_note(result: AttentionResult, rows: list[TokenAxis | None]) -> list[str]:
    """A note when the encoder's maps hold another number of frames than the conv stack the configs describe (a
    folder without the model's ``config.json``: wav2vec2's stack assumed): the frames are then numbered, not timed."""
    enc = next((m for m, s in zip(result.maps, result.sites) if s.stack == "encoder"), None)
    axis = rows[0] if rows else None
    if enc is None or axis is None or enc.shape[-1] == len(axis.labels):
        return []
    return [
        f"the encoder's maps hold {enc.shape[-1]} frames, and the conv stack config.json describes (conv_kernel, "
        f"conv_stride; wav2vec2's when it names none) makes {len(axis.labels)}: frames are numbered, not timed; put "
        "the model's config.json beside it"
    ]


def on_raw_samples(meta: dict) -> bool:
    """Whether a model's ``meta["audio"]`` is this extractor's (an encoder alone on samples, not Whisper)."""
    a = meta.get("audio")
    return isinstance(a, dict) and a.get("feature_extractor_type") == EXTRACTOR


def with_conv(prep: dict, cfg: dict) -> dict:
    """``preprocessor_config.json`` with ``config.json``'s conv stack (the frames' spacing lives there)."""
    return {**prep, **{k: cfg[k] for k in ("conv_kernel", "conv_stride") if k in cfg}}
