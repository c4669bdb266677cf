"""A memory refusal names the ``--max-seconds`` that fits (runtime/shorten.py, memory_kept._cut_that_fits), checked
against a hand computation on a plan whose need is known in closed form: weights of 415 MB (a wav2vec2-base's, so
they dominate a 0.5 GB cap) plus 12 heads of 50-frames-a-second maps, T² float32 each."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from attnviz.core import limits
from attnviz.runtime.memory_kept import FIT_SHARE, Estimate, check_run
from attnviz.runtime.shorten import Shorten, shortening

WEIGHTS = 415_000_000
RATE = 16000


class ClosedFormPlan:
    """An estimate cache whose need for ``input_values [1, samples]`` is WEIGHTS + 12 maps of T² float32."""

    def __init__(self):
        self.passed: dict = {}
        self.lock = threading.Lock()

    @staticmethod
    def need(samples: int) -> int:
        t = (samples - 400) // 320 + 1
        return WEIGHTS + 12 * 12 * t * t * 4

    def outputs(self):
        return ["logits"]

    def estimate(self, shapes, keep, within=None):
        n = self.need(shapes["input_values"][0][-1])
        return Estimate(n, WEIGHTS, ("scores", (1, 12, 1, 1), "float32", 4))


def test_the_refusal_names_the_largest_tenth_of_a_second_whose_need_fits(monkeypatch):
    monkeypatch.setenv(limits.MEMORY_ENV, "0.5")
    cap = 500_000_000
    feeds = {"input_values": np.zeros((1, 60 * RATE), np.float32)}
    with shortening(Shorten("input_values", RATE, "max_seconds", "the clip")):
        with pytest.raises(limits.MemoryRefused) as e:
            check_run(ClosedFormPlan(), feeds, None, "model.onnx")
    base = ClosedFormPlan.need(RATE // 10)

    def fits(s: float) -> bool:  # by hand: the input's part of the need, with the arena's margin, on the weights
        return base + (ClosedFormPlan.need(int(round(s * RATE))) - base) / FIT_SHARE <= cap

    want = max(k / 10 for k in range(1, 600) if fits(k / 10))
    assert not fits(want + 0.1) and want > 2.0  # several seconds, though the weights take 83 % of the cap
    assert f"cut the clip with --max-seconds {want:g}, or raise the cap" in str(e.value)
    # without a way to shorten (a text model's run), the general words
    with pytest.raises(limits.MemoryRefused) as e:
        check_run(ClosedFormPlan(), feeds, None, "model.onnx")
    assert "shorten the input if the need grows with it" in str(e.value)
