"""Every note a command prints is one line on stderr, ``attnviz: note: ...`` (a warning ``attnviz: warning: ...``),
as an error is ``attnviz: error: ...``; stdout keeps the results alone, which scripts parse.  Session 21 found three
spellings: ``note:`` on stdout (align-audio, export-hf), ``note:`` on stderr (figure, train) and bare lines
(``attnviz: 8 tokens truncated ...``, ``attnviz: no input given ...``, train's ``resumed from step ...``)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from onnx_builders import VOCAB, tiny_text_model

from attnviz.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_text_model(tmp_path_factory.mktemp("notes") / "model.onnx")


def _streams(capsys) -> tuple[list[str], list[str]]:
    io = capsys.readouterr()
    return io.out.splitlines(), io.err.splitlines()


def test_extract_cut_note_is_on_stderr_with_the_prefix(model, tmp_path, capsys):
    out = tmp_path / "o.npz"
    assert (
        main(["extract", str(model), "--text", "the cat sat on the mat", "--max-tokens", "4", "--out", str(out)]) == 0
    )
    stdout, stderr = _streams(capsys)
    assert stderr == ["attnviz: note: 8 tokens truncated to the first 4 (--max-tokens 4)"]
    # the result line, then (a classifier: gen30) its prediction, as the window's sidebar says it; no note
    assert len(stdout) == 2 and stdout[0].startswith(f"wrote {out}: ") and stdout[1].startswith("prediction: ")


def test_figure_of_a_batch_notes_the_row_it_drew(model, tmp_path, capsys):
    ids = np.array([[VOCAB.index(w) for w in ("[CLS]", "the", "cat", "[SEP]")]] * 2, np.int64)  # two rows
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, input_ids=ids)
    fig = tmp_path / "f.png"
    assert (
        main(["figure", str(model), "--inputs", str(feeds), "--view", "heatmap", "--dpi", "40", "--out", str(fig)]) == 0
    )
    stdout, stderr = _streams(capsys)
    assert stderr == ["attnviz: note: the input holds 2 rows; drawing row 0 (pick another with --batch-index)"]
    assert stdout == [f"wrote {fig}"]


def test_figure_without_input_notes_the_sample(capsys, tmp_path):
    fig = tmp_path / "s.png"
    model = ROOT / "models" / "sequence-classification.onnx"
    assert main(["figure", str(model), "--view", "overview", "--dpi", "40", "--out", str(fig)]) == 0
    stdout, stderr = _streams(capsys)
    assert stderr == ["attnviz: note: no input given; using the model's sample input (text)"]
    assert stdout == [f"wrote {fig}"]


def test_a_deprecated_flag_is_a_note_on_stderr(capsys):
    build_parser().parse_args(["extract", "m.onnx", "--out", "o.npz", "--mode", "dense"])
    stdout, stderr = _streams(capsys)
    assert (stdout, stderr) == ([], ["attnviz: note: --mode is deprecated here; use --memory"])


def test_a_note_with_line_breaks_stays_one_prefixed_line(capsys):
    from attnviz.core.notice import say

    say("a name\nwith a break", "warning")
    assert _streams(capsys) == ([], ["attnviz: warning: a name with a break"])


_OLD_SPELLINGS = ("note:", "warning:", "attnviz: note", "attnviz: warning")


def _printed_literals(tree: ast.AST):
    """The leading text of every print(...) / stream.write(...) argument that is a string or f-string literal."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute):
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            if name in ("print", "write") and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    yield node.lineno, arg.value
                elif isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                    yield node.lineno, str(arg.values[0].value)


def test_no_command_spells_a_note_by_hand():
    """A note printed with its own f-string is how the three spellings came about: every one goes through
    ``attnviz.core.notice.say`` (the one place that knows the prefix and the stream)."""
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text[:40]!r}"
        for path in sorted((ROOT / "attnviz").rglob("*.py"))
        if path.name != "notice.py"
        for line, text in _printed_literals(ast.parse(path.read_text()))
        if text.lstrip().lower().startswith(_OLD_SPELLINGS)
    ]
    assert not found, found


def test_an_unavailable_command_is_an_error_line(monkeypatch, capsys):
    """A part not installed (the training extra): exit 2 said ``attnviz: 'attnviz train' is unavailable``, an error
    without the ``error:`` every other refusal carries."""
    import attnviz.cli as cli

    monkeypatch.setitem(cli.COMMANDS, "absent", "attnviz.no_such_module")
    assert main(["absent"]) == 2
    stdout, stderr = _streams(capsys)
    assert stdout == [] and stderr == [
        "attnviz: error: 'attnviz absent' is unavailable: No module named 'attnviz.no_such_module'"
    ]
