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
