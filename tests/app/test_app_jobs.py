"""What the window runs in workers (attnviz.app.jobs), on the shipped demo models and the real runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from attnviz import AttnvizError
from attnviz.app import jobs
from attnviz.runtime.request import AnalyzeRequest

pytest.importorskip("onnxruntime")
MODELS = Path(__file__).resolve().parents[2] / "models"


def test_analyze_runs_the_model_and_pools_the_overview(tmp_path):
    from attnviz.core.view import THUMB, Selection, thumbnails, thumbnails_kept
    from attnviz.runtime import open_model

    m = jobs.open_model_ready(MODELS / "sequence-classification.onnx")
    assert all(s.heads == 4 for s in m.sites)
    seen = []
    r = jobs.analyze(m, AnalyzeRequest(text="1 2 3 9"), progress=lambda p, t: seen.append(t))
    plain = open_model(MODELS / "sequence-classification.onnx").analyze(text="1 2 3 9")
    for a, b in zip(r.maps, plain.maps):
        np.testing.assert_allclose(a.array(), b.array(), atol=1e-7)
    assert r.tokens.labels == ["1", "2", "3", "9"]
    assert seen[0] == "running the model…" and seen[-1] == "preparing thumbnails…"  # the runtime reports between
    # the worker pooled the overview and left it with the result: the window's first draw pools nothing
    assert thumbnails_kept(r, Selection()) and not thumbnails_kept(plain, Selection())
    want, got = thumbnails(plain, -1, THUMB), thumbnails(r, -1, THUMB)
    assert want.keys() == got.keys()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], atol=1e-7)
    assert r.info["timings"]["analyze (wall)"] > 0


def test_open_refuses_garbage_in_one_line(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00not a model")
    with pytest.raises(AttnvizError) as e:
        jobs.open_model_ready(bad)
    assert "bad.onnx" in str(e.value) and "\n" not in str(e.value)
