"""The bundled Whisper demo (models/spoken-digits) run once on its sample clip, and the clip's encoder frames worked
out independently of attnviz: from the WAV's own header (soundfile) and the folder's preprocessor_config.json (an
encoder frame is two mel hops).  Shared by the tests of the clip cut (tests/core/test_clip_*.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[1] / "models" / "spoken-digits"


def demo_and_clip():
    """(a fresh run of the demo: its result on its sample with 8 generated steps, the encoder frames the clip's samples fill)."""
    sf = pytest.importorskip("soundfile")
    pytest.importorskip("onnxruntime")
    if not (DEMO / "encoder_model.onnx").is_file():
        pytest.skip("models/spoken-digits is not in this checkout")
    info = sf.info(str(DEMO / "sample.wav"))
    pre = json.loads((DEMO / "preprocessor_config.json").read_text())
    assert info.samplerate == pre["sampling_rate"]
    from attnviz.runtime import open_model

    result = open_model(DEMO, provider="cpu").analyze(audio=str(DEMO / "sample.wav"), generate=8)
    return result, math.ceil(info.frames / (2 * pre["hop_length"]))


def window_frames() -> int:
    """The encoder frames of the demo's padded window, from its preprocessor_config.json (two mel frames each)."""
    pre = json.loads((DEMO / "preprocessor_config.json").read_text())
    return pre["nb_max_frames"] // 2


def hand_thumbnails(result, clip: int, side: int = 64) -> list:
    """Every head's overview thumbnail of the demo's result (:func:`hand_map_thumbnails`, one list)."""
    return [t for per_map in hand_map_thumbnails(result, clip, side) for t in per_map]


def hand_map_thumbnails(result, clip: int, side: int = 64) -> list:
    """Per map of ``result.maps`` (a block's ``sites`` index them), its heads' overview thumbnails: each head's overview thumbnail of the demo's result, pooled here from its maps with numpy: an axis as long
    as the padded window (the encoder's frames) cut to the clip's ``clip`` frames, then each axis max-pooled in runs
    of ``ceil(n / side)`` from its start, a short last run padded with zeros (the weights are not negative)."""
    import numpy as np

    window, out = window_frames(), []
    for m in result.maps:
        a = np.asarray(m.array()[0], np.float64)  # [H, Tq, Tk] of the one clip
        a = a[:, : clip if a.shape[1] == window else None, : clip if a.shape[2] == window else None]
        for axis in (1, 2):
            f = -(-a.shape[axis] // side)
            pad = [(0, 0)] * 3
            pad[axis] = (0, -a.shape[axis] % f)
            a = np.pad(a, pad)
            shape = list(a.shape)
            shape[axis : axis + 1] = [a.shape[axis] // f, f]
            a = a.reshape(shape).max(axis=axis + 1)
        out.append(list(a))
    return out
