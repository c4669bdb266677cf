"""A source the model has no input for is refused naming what the model does take.

A speech model given ``--image`` was told "give a text instead" (it takes a sound), a translation model given
``--audio`` "give a text or an image" (it takes no image); the inputs each bundled demo takes are read here from its
ONNX graph (onnx, not attnviz), so the expected words follow the files."""

from __future__ import annotations

import onnx
import pytest
from cli_run import REPO, run_cli_each
from PIL import Image

MODELS = REPO / "models"
SOUND = MODELS / "spoken-digits" / "sample.wav"


def _inputs(path):
    """The inputs a user feeds: the file's, or an export folder's encoder's (its decoder's other inputs are the
    encoder's outputs and the cache, which attnviz feeds itself)."""
    file = path / "encoder_model.onnx" if path.is_dir() else path
    return {i.name for i in onnx.load(file, load_external_data=False).graph.input}


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("takes-no")
    picture = tmp / "x.png"
    Image.new("RGB", (32, 32)).save(picture)
    cases = {
        ("translation.onnx", "image"): ["--text", "hi", "--image", picture],
        ("translation.onnx", "audio"): ["--text", "hi", "--audio", SOUND],
        ("spoken-digits", "image"): ["--image", picture],
        ("forecasting.onnx", "image"): ["--image", picture],
        ("translation.onnx", "max-seconds"): ["--text", "hi", "--max-seconds", "5.0"],
    }
    argvs = [
        ["extract", MODELS / m, *extra, "--out", tmp / f"{i}.npz"] for i, ((m, _), extra) in enumerate(cases.items())
    ]
    return dict(zip(cases, run_cli_each(*argvs))), tmp


@pytest.mark.parametrize(
    "model, given, takes, flag",
    [
        ("translation.onnx", "image", "give a text instead", "--text"),
        ("translation.onnx", "audio", "give a text instead", "--text"),
        ("spoken-digits", "image", "give a sound file instead", "--audio"),
        ("forecasting.onnx", "image", "give a series of numbers as text", "--text"),
    ],
)
def test_refusal_names_what_the_model_takes(refusals, model, given, takes, flag):
    results, tmp = refusals
    code, err = results[(model, given)]
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert f"takes no {given} input" in lines[0] and takes in lines[0] and flag in lines[0], lines[0]
    # every input the graph declares is named, and nothing was written
    assert all(name in lines[0] for name in _inputs(MODELS / model)), lines[0]
    assert not list(tmp.glob("*.npz"))


def test_max_seconds_of_a_model_without_sound(refusals):
    """``--max-seconds`` on a text model cut nothing and was dropped without a word: refused, as typed."""
    results, tmp = refusals
    code, err = results[("translation.onnx", "max-seconds")]
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "max seconds 5.0:" in lines[0] and "takes no sound" in lines[0] and "--max-seconds" in lines[0], lines[0]
    assert all(name in lines[0] for name in _inputs(MODELS / "translation.onnx")), lines[0]
