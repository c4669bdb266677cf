"""The corpus-like commands take the same harmless flag the same way: ``--no-progress`` on one input (no bar to
turn off) was refused by ``compare`` ("--no-progress: for a corpus run") and taken by ``ablate``; both take it now
and write what they write without it, and both still refuse a flag that would change a corpus run (``--workers``)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from onnx_builders import tiny_text_model

from attnviz.cli import main

ONE_INPUT = {
    "compare": lambda m: ["compare", m, m, "--text", "the cat sat"],
    "ablate": lambda m: ["ablate", m, "--text", "the cat sat", "--all-heads"],
}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_text_model(tmp_path_factory.mktemp("np") / "model.onnx")


@pytest.mark.parametrize("command", list(ONE_INPUT))
def test_no_progress_on_one_input_is_taken_and_changes_nothing(model, tmp_path, capsys, command):
    argv = [str(a) for a in ONE_INPUT[command](model)]
    assert main([*argv, "--out", str(tmp_path / "plain")]) == 0, capsys.readouterr().err
    assert main([*argv, "--no-progress", "--out", str(tmp_path / "quiet")]) == 0, capsys.readouterr().err
    plain, quiet = (pq.read_table(tmp_path / d / "heads.parquet") for d in ("plain", "quiet"))
    assert quiet.num_rows > 0 and quiet.equals(plain)


@pytest.mark.parametrize("command", list(ONE_INPUT))
def test_a_corpus_flag_on_one_input_is_still_refused_by_both(model, tmp_path, capsys, command):
    argv = [str(a) for a in ONE_INPUT[command](model)]
    assert main([*argv, "--workers", "2", "--no-progress", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--workers" in err and "corpus run" in err and "--no-progress" not in err, err
    assert not (tmp_path / "o").exists()
