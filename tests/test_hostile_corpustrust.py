"""audit16's tail of CLI trust problems: each bad input is one line naming the problem and the fix (exit code 2),
refused before any model runs, with the inputs untouched."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from attnviz.cli import main

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "models" / "sequence-classification.onnx"


def _refused(capsys, argv) -> str:
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("attnviz: error:") and len(err.splitlines()) == 1, (rc, err)
    assert "Traceback" not in err
    return err


@pytest.fixture
def texts(tmp_path):
    t = tmp_path / "c.txt"
    t.write_text("1 2 3\n4 5 6\n")
    return t


@pytest.mark.parametrize("threads", ["0", "-2"])
@pytest.mark.parametrize("command", ["corpus", "ablate"])
def test_threads_below_one_is_refused_in_one_line(command, threads, texts, tmp_path, capsys):
    """--threads 0 used to be read as "the default" without a word (cfg.threads or default); compare refused it."""
    argv = [command, MODEL, "--texts", texts, "--out", tmp_path / "out", "--threads", threads]
    err = _refused(capsys, argv)
    assert "--threads must be 1 or more" in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["corpus", "bert-base-uncased", "--texts", "{texts}", "--out", "{out}"],
        ["compare", MODEL, "bert-base-uncased", "--texts", "{texts}", "--out", "{out}"],
        ["compare", "bert-base-uncased", MODEL, "--text", "1 2 3", "--out", "{out}"],
        ["export-hf", "bert-base-uncased", "--out", "{out}"],
    ],
    ids=["corpus", "compare-texts", "compare-text", "export-hf"],
)
def test_a_hub_name_gets_opens_download_and_export_hint(argv, texts, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the name is not a file here
    err = _refused(capsys, [str(a).format(texts=texts, out=tmp_path / "out") for a in argv])
    assert "huggingface-cli download bert-base-uncased --local-dir DIR" in err and "attnviz export-hf DIR" in err


def test_export_hf_given_config_json_says_give_its_folder(tmp_path, capsys):
    folder = tmp_path / "bert"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    err = _refused(capsys, ["export-hf", folder / "config.json", "--out", tmp_path / "out"])
    assert "is a file; give the folder that holds it" in err and str(folder) in err
    assert (folder / "config.json").read_text() == "{}" and not (tmp_path / "out").exists()


def test_figure_all_heads_refuses_a_bad_out_before_the_model_runs(tmp_path, capsys):
    """The model is not an ONNX file: were it opened first, the line would be about the model, not --out."""
    model = tmp_path / "junk.onnx"
    model.write_bytes(b"\x00not onnx at all" * 8)
    existing = tmp_path / "existing.txt"
    existing.write_text("keep")
    err = _refused(capsys, ["figure", model, "--text", "1 2 3", "--all-heads", "--out", existing])
    assert f"--out {existing}: end it in .pdf/.svg/.png or give a folder for --all-heads" in err
    assert existing.read_text() == "keep"


def test_average_refuses_the_same_checkpoint_twice(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ckpt = tmp_path / "step-10.safetensors"
    ckpt.write_bytes(b"weights")
    before = hashlib.sha256(ckpt.read_bytes()).hexdigest()
    err = _refused(capsys, ["average", tmp_path, "--weights", ckpt, "./step-10.safetensors"])
    assert "twice" in err and "list each checkpoint once" in err
    assert hashlib.sha256(ckpt.read_bytes()).hexdigest() == before
