"""``--out`` naming the folder the model is read from: corpus, compare and ablate wrote heads.parquet and run.json
among the export's files, and ``attnviz open FOLDER`` then opened those results instead of the model (a folder
holding both files is a results folder).  Now one line, exit 2, the folder as it was; a folder inside the model's
is still fine (nothing reads it as the model)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from onnx_builders import tiny_text_model

from attnviz.app.rules import file_kind
from attnviz.cli import main


def listing(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return tiny_text_model(tmp_path_factory.mktemp("built") / "model.onnx")


def _argv(command: str, model: Path, texts: Path) -> list:
    return {
        "corpus": ["corpus", model, "--texts", texts, "--workers", "1", "--no-progress"],
        "compare": ["compare", model, model, "--text", "the cat"],
        "compare --texts": ["compare", model, model, "--texts", texts, "--workers", "1", "--no-progress"],
        "ablate": ["ablate", model, "--text", "the cat", "--all-heads"],
        "ablate --texts": ["ablate", model, "--texts", texts, "--all-heads", "--workers", "1", "--no-progress"],
    }[command]


def _folder(tmp_path: Path, model: Path, sub: str = "export") -> tuple[Path, Path]:
    (tmp_path / sub).mkdir(parents=True)
    m = Path(shutil.copy(model, tmp_path / sub / "model.onnx"))
    texts = tmp_path / "t.txt"
    texts.write_text("the cat sat\nthe dog ran home\n")
    return m, texts


@pytest.mark.parametrize("command", ["corpus", "compare", "compare --texts", "ablate", "ablate --texts"])
def test_out_the_models_own_folder_is_refused(tmp_path, capsys, model, command):
    m, texts = _folder(tmp_path, model)
    before = listing(m.parent)
    rc = main([str(a) for a in [*_argv(command, m, texts), "--out", m.parent]])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert err.startswith("attnviz: error:") and "\n" not in err and "Traceback" not in err, err
    assert "is the folder" in err and "another --out" in err, err
    assert listing(m.parent) == before and file_kind(m.parent) == "model"


def test_out_dot_in_the_models_folder_and_a_hub_repository_are_refused(tmp_path, capsys, model, monkeypatch):
    m, texts = _folder(tmp_path, model, "repo/onnx")  # the Hub layout: attnviz open REPO reads REPO/onnx
    monkeypatch.chdir(m.parent)
    for out in (".", "..", str(tmp_path / "repo" / "." / "onnx")):
        rc = main(["corpus", "model.onnx", "--texts", str(texts), "--workers", "1", "--no-progress", "--out", out])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and "is the folder" in err, (out, err)
    assert sorted(p.name for p in (tmp_path / "repo").rglob("*")) == ["model.onnx", "onnx"]


def test_a_results_folder_inside_the_models_folder_is_fine(tmp_path, capsys, model):
    m, texts = _folder(tmp_path, model)
    out = m.parent / "results"
    assert main([str(a) for a in [*_argv("corpus", m, texts), "--out", out]]) == 0, capsys.readouterr().err
    assert file_kind(out) == "corpus" and file_kind(m.parent) == "model"  # the model still opens as the model


def test_extract_again_into_the_model_folder_names_the_folder_not_the_model(tmp_path, capsys, model):
    """``attnviz extract FOLDER --out FOLDER/maps.npz`` writes (a new file); the same command again is refused, as
    every file of a model folder is read: the line said "is the model this command reads ... destroy it" of the
    command's own last output.  It now names the folder and the fix, and the first maps stay byte for byte."""
    m, _ = _folder(tmp_path, model)
    out = m.parent / "maps.npz"
    argv = ["extract", str(m.parent), "--text", "the cat sat", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    before = listing(m.parent)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"attnviz: error: --out {out} is a file in {m.parent.resolve()} (the model), a folder this command reads: "
        "writing would overwrite an input file of that folder and destroy it; choose --out outside it"
    )
    assert listing(m.parent) == before
