"""``attnviz compare`` says what each model predicted, not only the outputs' |Δ| and KL: "do A and B still agree?"
was a number to turn into a class by hand.  B is the demo classifier with its head's bias moved towards another
class (onnx, by hand); the classes and probabilities expected are computed with onnxruntime alone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from attnviz.cli import main

MODEL = Path(__file__).resolve().parents[2] / "models" / "vit-classification.onnx"


def _said(path: Path, pixels: np.ndarray) -> str:
    """The class and probability the model's logits give, as core.prediction words them, from onnxruntime alone."""
    logits = (
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        .run(["logits"], {"pixel_values": pixels})[0][0]
        .astype(np.float64)
    )
    meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
    p = np.exp(logits - logits.max())
    p /= p.sum()
    i = int(np.argmax(p))
    return f"{json.loads(meta['attnviz.labels'])[i]} (p = {p[i]:.2f})"


def _moved(tmp: Path, pixels: np.ndarray) -> Path:
    """A copy whose classifier bias favours the class A ranks last, by enough to win."""
    m = onnx.load(str(MODEL))
    logits = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"]).run(
        ["logits"], {"pixel_values": pixels}
    )[0][0]
    bias = next(i for i in m.graph.initializer if i.name == "model.head.bias")
    b = numpy_helper.to_array(bias).copy()
    b[int(np.argmin(logits))] += float(logits.max() - logits.min()) + 5.0
    bias.CopyFrom(numpy_helper.from_array(b, bias.name))
    out = tmp / "moved.onnx"
    onnx.save(m, str(out))
    return out


def test_compare_names_each_models_class_and_whether_they_agree(tmp_path, capsys):
    pixels = np.random.default_rng(2).uniform(-1, 1, (1, 3, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "feeds.npz", pixel_values=pixels)
    other = _moved(tmp_path, pixels)
    a, b = _said(MODEL, pixels), _said(other, pixels)
    assert a.split(" (")[0] != b.split(" (")[0]  # the premise: the moved bias flips the class
    for second, want_b, verdict in ((MODEL, a, "the same class"), (other, b, "a different class")):
        out = tmp_path / f"out-{second.stem}"
        argv = ["compare", str(MODEL), str(second), "--inputs", str(tmp_path / "feeds.npz"), "--out", str(out)]
        assert main(argv) == 0
        lines = capsys.readouterr().out.splitlines()
        assert f"prediction: A → {a}, B → {want_b}: {verdict}" in lines, lines
        assert json.loads((out / "run.json").read_text())["predictions"] == {"A": a, "B": want_b}
