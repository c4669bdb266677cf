"""gen30: ``attnviz extract`` runs a model as the window and ``figure MODEL`` do, and says what it ran.

Its steps not given, it generates the window's steps for the model's kind (``--generate 0`` still: none), records
them in the .npz and says them; a classifier's summary names the class the window's sidebar names; a forecaster's
series refuses an empty item between two commas.  Checked on the shipped demo models against the .npz's own
arrays, the window's rule (:func:`attnviz.app.rules.first_input`) and logits computed with onnxruntime directly.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.runtime.inputs import parse_series

pytest.importorskip("onnxruntime")
ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
TRANSLATION = MODELS / "translation.onnx"
SRC, TGT = "ἐν ἀρχῇ ἦν ὁ λόγος", "in the beginning was the word"


def npz_facts(path: Path) -> tuple[dict, list[str], list[str]]:
    """(info, generated tokens, the decoder's query labels), read from the .npz's arrays as numpy stores them."""
    with np.load(path, allow_pickle=False) as z:
        info = json.loads(str(z["info"]))
        generated = [str(t) for t in z["generated"]] if "generated" in z.files else []
        keys = [str(t) for t in z["key_tokens"]] if "key_tokens" in z.files else []
    return info, generated, keys


def extract(capsys, *argv) -> list[str]:
    assert main(["extract", *map(str, argv)]) == 0
    return capsys.readouterr().out.strip().splitlines()


def test_extract_generates_the_windows_steps_unless_told_not_to(tmp_path, capsys):
    from attnviz.app.rules import first_input
    from attnviz.runtime import open_model

    window = first_input(open_model(TRANSLATION, provider="cpu"), {"text": SRC})["generate"]
    assert window == 32  # what the window runs this translation with (core.steps_default.default_generate)
    out = tmp_path / "m.npz"
    lines = extract(capsys, TRANSLATION, "--text", SRC, "--out", out)
    info, generated, keys = npz_facts(out)
    assert info["generate"] == window and 0 < len(generated) <= window
    assert info["generated_ids"] and len(info["generated_ids"]) == len(generated)
    # the decoder read what it generated: its start token, then each generated token but the last
    assert keys[1:] == generated[:-1]
    assert (
        f"generated {len(generated)} tokens ({window} steps by default, as the window; --generate 0 for none)"
        in (lines[0])
    )
    assert lines[1] == "generated: " + " ".join(generated)
    # --generate 0: none, as before; a target given with --text-pair is teacher-forced, as in the window
    for flags, steps in ((["--generate", "0"], 0), (["--text-pair", TGT], 0), (["--generate", "3"], 3)):
        lines = extract(capsys, TRANSLATION, "--text", SRC, *flags, "--out", out)
        info, generated, _ = npz_facts(out)
        assert info["generate"] == steps and len(generated) == steps
        assert "by default" not in lines[0] and any(line.startswith("generated: ") for line in lines) == bool(steps)
    # raw feeds holding the decoder's tokens are a target given (teacher-forced); without them, the default steps
    source = {"input_ids": np.array([[5, 6, 7, 2]]), "attention_mask": np.ones((1, 4), np.int64)}
    for name, decoder, steps in (("forced", {"decoder_input_ids": np.array([[1, 9, 4]])}, 0), ("source", {}, 32)):
        np.savez(tmp_path / f"{name}.npz", **source, **decoder)
        extract(capsys, TRANSLATION, "--inputs", tmp_path / f"{name}.npz", "--out", out)
        assert npz_facts(out)[0]["generate"] == steps


def softmax_top(logits: np.ndarray, labels: list[str]) -> str:
    z = logits.astype(np.float64)
    p = np.exp(z - z.max())
    p /= p.sum()
    return f"{labels[int(p.argmax())]} (p = {p.max():.2f})"


def test_a_classifiers_extract_prints_its_class_as_onnxruntime_computes_it(tmp_path, capsys):
    """The class and its probability from the model's logits run through onnxruntime alone (no attnviz), on
    feeds chosen where the demo is unsure (p 0.75, not its samples' 1.00)."""
    import onnx
    import onnxruntime as ort

    path = MODELS / "vit-classification.onnx"
    pixels = np.random.default_rng(2).uniform(-1, 1, (1, 3, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "feeds.npz", pixel_values=pixels)
    logits = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        ["logits"], {"pixel_values": pixels}
    )[0][0]
    meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
    want = softmax_top(logits, json.loads(meta["attnviz.labels"]))
    assert want == "circle (p = 0.75)"
    lines = extract(capsys, path, "--inputs", tmp_path / "feeds.npz", "--out", tmp_path / "m.npz")
    assert f"prediction: {want}" in lines


def test_an_empty_item_between_commas_of_a_series_is_refused(tmp_path, capsys):
    with pytest.raises(AttnvizError, match=r"^series item 3 is empty \(nothing between two commas, after '2'\); "):
        parse_series("1, 2,, 3")
    with pytest.raises(AttnvizError, match=r"^series item 3 is empty \(nothing between two commas, after '2'\)"):
        parse_series("1 2,\n, 3")  # a line that starts with a comma: the value before it left out
    with pytest.raises(AttnvizError, match=r"^series item 1 is empty \(a comma before the first value\)"):
        parse_series(",1,2")
    # a comma ending a line (a spreadsheet row, a CSV line) moves no value: kept
    np.testing.assert_array_equal(parse_series("1, 2, 3,\n4,5,"), np.float32([1, 2, 3, 4, 5]))
    np.testing.assert_array_equal(parse_series("1 2\t3"), np.float32([1, 2, 3]))
    path = MODELS / "forecasting.onnx"
    assert main(["extract", str(path), "--text", "0.1,,0.2,0.3", "--out", str(tmp_path / "m.npz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "attnviz: error: series item 2 is empty (nothing between two commas, after '0.1'); give the missing value "
        "there or remove the extra comma"
    ]
    assert not (tmp_path / "m.npz").exists()
