"""``attnviz train spoken-digits`` end to end on the tiny preset (a few steps): the run folder holds a Whisper
folder the engine opens with its sample clip, ``attnviz eval`` measures it (the folder or its run folder), and what
the loop's other tasks take but this one does not is one line."""

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("soundfile")

from attnviz.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("spoken") / "run"
    assert main(["train", "spoken-digits", "--preset", "tiny", "--steps", "4", "--quiet", "--out", str(out)]) == 0
    return out


def test_the_tiny_run_exports_a_speech_folder_with_its_sample(run):
    from attnviz.runtime import ModelSet, open_model

    folder = run / "model"
    names = {p.name for p in folder.iterdir()}
    assert {"encoder_model.onnx", "decoder_model.onnx", "preprocessor_config.json", "sample.wav"} <= names
    m = open_model(folder, provider="cpu")
    assert isinstance(m, ModelSet) and m.meta["sample"]["audio"] == "sample.wav"
    summary = json.loads((run / "metrics.json").read_text())
    assert summary["steps"] == 4 and summary["metrics"]["n"] == 16
    gen = json.loads((folder / "generation_config.json").read_text())
    assert gen["alignment_heads"] == summary["alignment_heads"]


def test_eval_takes_the_folder_and_its_run_folder(run, capsys):
    capsys.readouterr()
    assert main(["eval", str(run), "--n", "3"]) == 0
    a = json.loads(capsys.readouterr().out)
    assert main(["eval", str(run / "model"), "--n", "3"]) == 0
    b = json.loads(capsys.readouterr().out)
    assert a["task"] == "spoken-digits" and a["metrics"] == b["metrics"] and a["metrics"]["n"] == 3


def test_loop_options_are_one_line(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["train", "spoken-digits", "--preset", "tiny", "--out", str(out), "--set", "lr=0.1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--set" in err[0] and "spoken-digits" in err[0] and not out.exists()


def test_the_sample_clip_is_looked_for_in_the_folder_only(run):
    from attnviz.runtime.sample import sample_input

    folder = run / "model"
    assert sample_input({"sample": {"audio": "sample.wav"}}, folder)["audio"] == str(folder / "sample.wav")
    assert "audio" not in sample_input({"sample": {"audio": "../model/sample.wav"}}, folder)
    assert "audio" not in sample_input({"sample": {"audio": str((folder / "sample.wav").resolve())}}, folder)
    assert "audio" not in sample_input({"sample": {"audio": "missing.wav"}}, folder)  # no image-style fallback
