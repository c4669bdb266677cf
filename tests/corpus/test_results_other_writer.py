"""A compare or ablate results folder opened as corpus results (File ▸ Open corpus results, `attnviz open DIR`)
says which command wrote it: the bare "missing examples.parquet" left the user guessing what the folder was.
The folders are written by the real commands on the bundled demo, not made by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.corpus import output

DEMO = Path(__file__).resolve().parents[2] / "models" / "sequence-classification.onnx"


@pytest.mark.parametrize(
    "command,argv",
    [
        ("compare", [str(DEMO), str(DEMO)]),
        ("ablate", [str(DEMO), "--heads", "encoder self 0:0"]),
    ],
)
def test_a_compare_or_ablate_folder_names_its_command(command, argv, tmp_path, capsys):
    out = tmp_path / "r"
    assert main([command, *argv, "--text", "3 1 4 1 5", "--out", str(out)]) == 0
    capsys.readouterr()
    with pytest.raises(AttnvizError) as e:
        output.read(out)
    assert f"written by 'attnviz {command}', not a corpus results folder" in str(e.value), e.value


def test_a_folder_of_neither_says_only_what_is_missing(tmp_path):
    (tmp_path / "run.json").write_text('{"models": 1}')  # one of compare's keys only: not told as compare's
    with pytest.raises(AttnvizError) as e:
        output.read(tmp_path)
    assert "written by" not in str(e.value) and "not a corpus results folder" in str(e.value)
