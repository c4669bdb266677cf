"""``--memory auto`` on a raw-sample speech encoder: the maps' side is the conv stack's frames, not the samples.

The estimate that picks the mode counted a clip's samples as positions (48,000 for 3 s), so a 3 s clip on the
tiny wav2vec2 (149 x 149 maps per head) ran on demand.  The frames are counted here by hand from wav2vec2-base's
conv stack (kernels 10,3,3,3,3,2,2, strides 5,2,2,2,2,2,2: ``(samples - 400) // 320 + 1``).
"""

import numpy as np
import pytest

from attnviz.runtime import model as model_mod
from attnviz.runtime import open_model

RATE = 16000
pytestmark = pytest.mark.slow  # the tiny wav2vec2 export (cached under ~/.cache/attnviz-tests after one build)


def frames(seconds: float) -> int:
    return (int(seconds * RATE) - 400) // 320 + 1


@pytest.fixture(scope="module")
def wav2vec2(optimum_export):
    return open_model(optimum_export("wav2vec2") / "onnx", provider="cpu")


def clip(seconds: float) -> dict:
    return {"input_values": np.zeros((1, int(seconds * RATE)), np.float32)}


def test_a_short_clip_runs_dense_and_a_long_one_on_demand(wav2vec2):
    short, long = clip(3), clip(120)
    assert frames(3) == 149
    assert wav2vec2.choose_mode(short) == "dense"
    assert wav2vec2.choose_mode(clip(30)) == "dense"  # the longest clip taken without --max-seconds
    assert wav2vec2.choose_mode(long) == "ondemand"
    # the estimate is of frames x frames maps: it grows as the square of the frames, not of the samples
    ratio = wav2vec2.estimate_mb(long) / wav2vec2.estimate_mb(short)
    assert ratio == pytest.approx((frames(120) / frames(3)) ** 2, rel=1e-9)
    # 4-byte weights of frames x frames per head: a whole number of heads (each map 149 x 149 floats)
    heads = wav2vec2.estimate_mb(short) * 2**20 / (4 * frames(3) ** 2)
    assert heads == pytest.approx(round(heads)) and 8 <= round(heads) <= 24


def test_the_long_clips_estimate_is_what_picks_on_demand(wav2vec2, monkeypatch):
    long = clip(120)
    est = wav2vec2.estimate_mb(long)
    assert est > model_mod.DENSE_LIMIT_MB
    monkeypatch.setattr(model_mod, "DENSE_LIMIT_MB", est)  # the same clip, under a limit it no longer exceeds
    assert wav2vec2.choose_mode(long) == "dense"
    monkeypatch.setattr(model_mod, "DENSE_LIMIT_MB", est * 0.999)
    assert wav2vec2.choose_mode(long) == "ondemand"
