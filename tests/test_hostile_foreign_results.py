"""Audit 17: ``--out`` naming a folder that holds another command's results.  corpus, compare and ablate all write
heads.parquet and run.json: ``ablate --out`` a corpus run's folder replaced both without a word (the corpus
statistics lost, examples.parquet left beside an ablation table, a folder ``attnviz open`` refused).  Now one line
naming the command whose results are there, exit 2, every file as it was; a command still replaces its own."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from onnx_builders import tiny_text_model

from attnviz.cli import main


def shas(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("foreign")
    model = tiny_text_model(d / "model.onnx")
    texts = d / "t.txt"
    texts.write_text("the cat sat\nthe dog ran home\n")
    folders = {}
    runs = {
        "corpus": ["corpus", model, "--texts", texts, "--workers", "1"],
        "compare": ["compare", model, model, "--text", "the cat"],
        "ablate": ["ablate", model, "--text", "the cat", "--all-heads"],
    }
    for name, argv in runs.items():
        folders[name] = d / name
        assert main([str(a) for a in [*argv, "--out", folders[name]]]) == 0
    return model, texts, folders


def _argv(command: str, model, texts, out):
    return {
        "corpus": ["corpus", model, "--texts", texts, "--workers", "1", "--no-progress"],
        "compare --texts": ["compare", model, model, "--texts", texts, "--workers", "1", "--no-progress"],
        "compare": ["compare", model, model, "--text", "the cat"],
        "ablate --texts": ["ablate", model, "--texts", texts, "--all-heads", "--workers", "1", "--no-progress"],
        "ablate": ["ablate", model, "--text", "the cat", "--all-heads"],
    }[command] + ["--out", out]


CASES = [
    ("ablate", "corpus"),
    ("ablate --texts", "corpus"),
    ("compare", "corpus"),
    ("compare --texts", "corpus"),
    ("corpus", "compare"),
    ("corpus", "ablate"),
    ("ablate", "compare"),
    ("compare --texts", "ablate"),
]


@pytest.mark.parametrize("command, owner", CASES, ids=[f"{c} over {o}" for c, o in CASES])
def test_results_of_another_command_are_never_replaced(setup, capsys, command, owner):
    model, texts, folders = setup
    out = folders[owner]
    before = shas(out)
    rc = main([str(a) for a in _argv(command, model, texts, out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert err.startswith("attnviz: error:") and "\n" not in err and "Traceback" not in err, err
    for w in (f"'attnviz {owner}'", f"'attnviz {command.split()[0]}'", "another --out"):
        assert w in err, (w, err)
    assert shas(out) == before


@pytest.mark.parametrize("command", ["corpus", "compare", "ablate"])
def test_a_command_still_replaces_its_own_results(setup, capsys, tmp_path, command):
    model, texts, _ = setup
    out = tmp_path / "own"
    argv = [str(a) for a in _argv(command, model, texts, out)]
    assert main(argv) == 0
    assert main(argv) == 0, capsys.readouterr().err
