"""Which feature extractor a speech model's folder names: a registry by ``preprocessor_config.json``'s
``feature_extractor_type`` over Whisper's log-mel (:class:`~attnviz.runtime.audio.FeatureSpec`) and the raw samples
of wav2vec2 and kin (:class:`~attnviz.runtime.waveform.WaveSpec`).  Apart from both so that neither imports the
other's module back (the raw-sample spec draws its spectrogram with Whisper's log-mel)."""

from __future__ import annotations

from pathlib import Path

from attnviz.runtime.audio import EXTRACTOR, PREPROCESSOR, FeatureSpec, unknown_extractor
from attnviz.runtime.sidecar import sidecar, sidecar_json
from attnviz.runtime.waveform import WaveSpec, with_conv

AudioSpec = FeatureSpec | WaveSpec
EXTRACTORS: dict[str, type[FeatureSpec] | type[WaveSpec]] = {
    EXTRACTOR: FeatureSpec,  # Whisper: log-mel frames of a fixed window
    WaveSpec.feature_extractor_type: WaveSpec,  # wav2vec2, HuBERT, WavLM, data2vec-audio: raw samples
}


def audio_spec(d: dict) -> AudioSpec:
    """The spec a ``preprocessor_config.json`` (or a spec's ``asdict``, a model's ``meta["audio"]``) describes."""
    kind = d.get("feature_extractor_type", EXTRACTOR)
    cls = EXTRACTORS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise unknown_extractor(kind)
    return cls.from_dict(d)


def spec_for_model(model_file: Path) -> AudioSpec | None:
    """The spec beside a model file (read only where :func:`sidecar` allows; a raw-sample encoder's conv stack
    from the ``config.json`` there), or None when there is none."""
    from attnviz.core.untrusted import read_json

    p = sidecar(model_file, PREPROCESSOR)
    if p is None or not p.is_file():
        return None
    d = read_json(p, PREPROCESSOR, fix="fix or remove it")
    d = d if isinstance(d, dict) else {}
    if d.get("feature_extractor_type") == WaveSpec.feature_extractor_type:
        d = with_conv(d, sidecar_json(model_file, "config.json"))
    return audio_spec(d)


def map_positions(meta: dict, fed) -> int:
    """The encoder positions (the side of its maps) for ``fed``, a speech model's audio input: raw samples
    ``(batch, samples)`` or log-mel frames ``(batch, mels, frames)``, through the model's spec (a default
    wav2vec2 / Whisper one where the folder names none).  The memory estimate that picks ``--memory auto``'s mode
    counts these: a 3 s clip is 48,000 samples but 149 frames of a wav2vec2 stack."""
    a = meta.get("audio")
    spec = audio_spec(a) if isinstance(a, dict) else WaveSpec() if len(fed.shape) == 2 else FeatureSpec()
    return spec.positions(int(fed.shape[-1]))
