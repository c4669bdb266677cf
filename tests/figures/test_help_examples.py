"""The examples in `attnviz figure --help` run as shown, in order, from a checkout's root: they named
`models/bert.onnx`, which no checkout holds, and `--maps maps.npz` with nothing that wrote it (audit25)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from attnviz.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def _examples() -> list[list[str]]:
    parser = build_parser("figure")
    figure = parser._subparsers._group_actions[0].choices["figure"]  # type: ignore[union-attr]
    text = figure.epilog.split("examples", 1)[1].split(":", 1)[1]
    return [shlex.split(line, comments=True) for line in text.splitlines() if line.strip()]


def test_every_example_runs_as_shown(tmp_path, monkeypatch, capsys):
    if not (ROOT / "models" / "translation.onnx").exists():
        pytest.skip("the translation demo is not in this checkout")
    (tmp_path / "models").symlink_to(ROOT / "models")  # a checkout's root, as the help says; outputs land here
    monkeypatch.chdir(tmp_path)
    examples = _examples()
    assert len(examples) >= 4 and all(argv[0] == "attnviz" for argv in examples)
    made: dict[str, bytes] = {}
    for argv in examples:
        assert main(argv[1:]) == 0, (argv, capsys.readouterr().err)
        out = argv[argv.index("--out") + 1] if "--out" in argv else None
        if out is not None and Path(out).is_file():
            made[out] = Path(out).read_bytes()
        if "--recipe" in argv:  # "the same bytes again": the figure the recipe names, rewritten identically
            recipe = argv[argv.index("--recipe") + 1]
            figure = recipe.removesuffix(".recipe.json")
            assert Path(figure).read_bytes() == made[figure]
    assert any(Path("heads").iterdir())  # --all-heads wrote its figures
