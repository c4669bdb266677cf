"""The window says what an export lost (issue 22 item 5): the Model sidebar shows the same one-line warning
``inspect`` and ``extract`` print when config.json soft-caps the attention and the graph has no tanh."""

from __future__ import annotations

import json

from gui_helpers import open_and_wait
from onnx_builders import tiny_text_model

from attnviz.runtime import open_model


def test_the_model_sidebar_shows_the_export_warning(qtbot, real_window, tmp_path):
    path = tiny_text_model(tmp_path / "model.onnx")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma2", "attn_logit_softcapping": 50.0}))
    want = open_model(path, provider="cpu").describe()["fidelity"]
    assert len(want) == 1
    w = real_window
    open_and_wait(qtbot, w, path, text="the cat sat")
    shown = w.sidebar.values("Model")["warning"]
    assert shown.startswith("config.json has attn_logit_softcapping 50") and want[0].startswith(shown.rstrip("…"))
    tip = w.sidebar.section("Model").child(4).toolTip(1)
    assert tip == want[0]  # the whole line, where the cell is too narrow
    assert "fidelity" not in w.sidebar.values("Run")  # said once, in the Model section


def test_no_warning_without_a_reason(qtbot, real_window, tmp_path):
    path = tiny_text_model(tmp_path / "model.onnx")
    w = real_window
    open_and_wait(qtbot, w, path, text="the cat sat")
    assert "warning" not in w.sidebar.values("Model")
