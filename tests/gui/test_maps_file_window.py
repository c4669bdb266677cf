"""gen30: the window opened on an ``attnviz extract`` .npz shows what the file holds (its generation steps, its
input, its model and its own path: the panel said "generate 0" for maps generated with 8 steps and the sidebar named
no file), and a classifier's prediction is the one line ``extract`` prints (one formatter, core/prediction.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from gui_helpers import open_and_wait

from attnviz.cli import main

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
SRC = "ἐν ἀρχῇ ἦν ὁ λόγος"


def test_the_window_on_a_maps_file_shows_its_steps_input_model_and_path(qtbot, real_window, tmp_path, capsys):
    w = real_window
    maps = tmp_path / "verse.npz"
    assert main(["extract", str(MODELS / "translation.onnx"), "--text", SRC, "--out", str(maps)]) == 0
    capsys.readouterr()
    with np.load(maps, allow_pickle=False) as z:  # what the file holds, read as numpy stores it
        arrays = {k: z[k] for k in z.files}
    info, generated = json.loads(str(arrays["info"])), [str(t) for t in arrays["generated"]]
    assert info["generate"] == 32 and 0 < len(generated) < 32  # the window's steps; it stopped at the end token
    w.open_npz(maps)
    assert w.inputs.generate.value() == info["generate"] and w.inputs.text.text() == SRC
    said = w.sidebar.values("Maps file")
    assert said["file"] == str(maps)
    assert said["model"] == f"translation ({MODELS / 'translation.onnx'})" and said["kind"] == "encoder-decoder"
    assert said["generate"] == f"32 steps (stopped after {len(generated)} tokens)"
    # a file written before extract recorded its steps: the tokens it generated are its steps
    del info["generate"]
    old = tmp_path / "old.npz"
    np.savez(old, **{**arrays, "info": np.array(json.dumps(info))})
    w.open_npz(old)
    assert w.inputs.generate.value() == len(generated) and w.sidebar.values("Maps file")["file"] == str(old)
    assert w.sidebar.values("Maps file")["generate"] == f"{len(generated)} steps"


def test_a_classifiers_prediction_is_the_line_extract_prints(qtbot, real_window, tmp_path, capsys):
    image = ROOT / "resources" / "samples" / "vit-classification.png"
    model = MODELS / "vit-classification.onnx"
    assert main(["extract", str(model), "--image", str(image), "--out", str(tmp_path / "m.npz")]) == 0
    [line] = [x for x in capsys.readouterr().out.splitlines() if x.startswith("prediction: ")]
    open_and_wait(qtbot, real_window, model, image=str(image))
    assert "prediction: " + real_window.sidebar.values("Run")["prediction"] == line
    # the maps file keeps it (it holds no outputs to compute it from): the window on the file alone shows it too
    with np.load(tmp_path / "m.npz", allow_pickle=False) as z:
        assert "prediction: " + json.loads(str(z["info"]))["prediction"] == line
    real_window.open_npz(tmp_path / "m.npz")
    assert "prediction: " + real_window.sidebar.values("Run")["prediction"] == line
