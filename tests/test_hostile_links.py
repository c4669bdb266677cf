"""A model (or any input file) given through a symbolic link that leads nowhere: one line that says it is a link,
where it points and what to do, exit 2 — not "no such file" (the user looked for a typo in a name that is there)
nor, for a name like a Hub model's, the Hub download hint."""

from __future__ import annotations

import os

import pytest
from cli_run import run_cli


def _one_line(err: str) -> str:
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("attnviz: error: "), err
    return lines[0]


@pytest.mark.parametrize("command", [["inspect"], ["extract", "--text", "the cat", "--out", "o.npz"]])
def test_a_link_to_a_missing_file(tmp_path, command):
    link = tmp_path / "model"  # named like a Hub model: a link is a local file gone wrong all the same
    gone = tmp_path / "moved" / "model.onnx"
    os.symlink(gone, link)
    code, err = run_cli(command[0], link, *command[1:], cwd=tmp_path)
    line = _one_line(err)
    assert code == 2
    assert f"a symbolic link to {gone}, which does not exist" in line and "huggingface" not in line
    assert not (tmp_path / "o.npz").exists()


def test_a_link_that_leads_back_to_itself(tmp_path):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    os.symlink(b, a)
    os.symlink(a, b)
    code, err = run_cli("inspect", a)
    assert code == 2 and "a symbolic link that leads back to itself" in _one_line(err)


def test_the_window_names_the_link_too(tmp_path):
    link = tmp_path / "maps.npz"
    os.symlink(tmp_path / "elsewhere.npz", link)
    code, err = run_cli("open", link, "--screenshot", tmp_path / "x.png", env={"QT_QPA_PLATFORM": "offscreen"})
    line = _one_line(err)
    assert code == 2 and "a symbolic link to" in line and "give an .onnx model" not in line
    assert not (tmp_path / "x.png").exists()
