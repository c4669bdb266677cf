"""What the window runs in workers (attnviz.app.jobs), on the shipped demo models and the real runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from attnviz import AttnvizError
from attnviz.app import jobs

pytest.importorskip("onnxruntime")
MODELS = Path(__file__).resolve().parents[2] / "models"


def test_analyze_runs_the_model_and_pools_the_overview(tmp_path):
    from attnviz.core.view import THUMB, thumbnails
    from attnviz.runtime import open_model

    m = jobs.open_model_ready(MODELS / "sequence-classification.onnx")
    assert all(s.heads == 4 for s in m.sites)
    seen = []
    r = jobs.analyze(m, {"text": "1 2 3 9", "generate": ""}, progress=lambda p, t: seen.append(t))
    plain = open_model(MODELS / "sequence-classification.onnx").analyze(text="1 2 3 9")
    for a, b in zip(r.maps, plain.maps):
        np.testing.assert_allclose(a.array(), b.array(), atol=1e-7)
    assert r.tokens.labels == ["1", "2", "3", "9"]
    assert seen[0] == "running the model…" and seen[-1] == "preparing thumbnails…"  # the runtime reports between
    want = thumbnails(plain, -1, THUMB)
    assert want.keys() == r.gui_thumbnails.keys()
    for k in want:
        np.testing.assert_allclose(r.gui_thumbnails[k], want[k], atol=1e-7)
    assert r.info["timings"]["analyze (wall)"] > 0


def test_analyze_passes_only_what_the_model_takes():
    class Plain:  # a model (npz-backed, scripted) whose analyze takes just the input
        def analyze(self, text=None, text_pair=None, image=None, generate=0):
            raise AssertionError("not called")

    got = jobs.analyze_kwargs(Plain(), {"text": "x", "max_tokens": 8}, progress=print, cancelled=bool)
    assert got == {"text": "x", "text_pair": None, "image": None, "generate": 0}
    m = jobs.open_model_ready(MODELS / "sequence-classification.onnx")
    got = jobs.analyze_kwargs(m, {"text": "x", "generate": "2", "max_tokens": 8, "image_size": None}, progress=print)
    assert got == {"text": "x", "text_pair": None, "image": None, "generate": 2, "progress": print, "max_tokens": 8}


def test_open_refuses_garbage_in_one_line(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00not a model")
    with pytest.raises(AttnvizError) as e:
        jobs.open_model_ready(bad)
    assert "bad.onnx" in str(e.value) and "\n" not in str(e.value)


def test_ort_reason_keeps_the_readable_tail():
    e = RuntimeError(
        "[ONNXRuntimeError] : 10 : INVALID_GRAPH : Load model from m.onnx failed:This is an invalid model. (op_type:Foo) unknown op"
    )
    assert jobs.ort_reason(e) == "unknown op"
    assert jobs.ort_reason(ValueError("plain\nmessage")) == "plain message"
