"""Every number flag of every command reads ASCII digits only (attnviz/core/numbers.py).

``int()`` and ``float()`` read ``1_0`` as 10 and ``٣`` (an Arabic-Indic three) as 3: ``figure --span 1_0-2_0`` drew
positions 10..20 without a word.  The parser of each command is walked here, so a number flag added later is covered
as soon as it exists; the flags with a form of their own (``--span LO-HI``, ``--head 0,3``, ``--heads 'L:H'``,
``--size WxH``) are checked one by one.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from cli_run import run_cli

from attnviz.cli import COMMANDS, build_parser
from attnviz.core.numbers import as_typed_arg, decimal, decimal_arg, whole, whole_arg

# not numbers in the digits 0-9, each of which int() or float() reads as one
NOT_ASCII = ["1_0", "٣", "١٠", "３", "1_000.5", "٠.٥"]


def _number_actions():
    """(command, its parser, action) for every flag of every command that reads a number."""
    top = build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    for name in COMMANDS:
        parser = sub.choices[name]
        for action in parser._actions:
            if action.option_strings and action.type in (whole_arg, decimal_arg, as_typed_arg, int, float):
                yield name, parser, action


NUMBER_ACTIONS = list(_number_actions())


def test_every_number_flag_is_strict():
    """No command keeps argparse's int / float (they read '1_0' and '٣'); the walk finds the flags it must."""
    assert NUMBER_ACTIONS, "no number flags found: the walk is broken"
    loose = [f"{c} {a.option_strings[-1]}" for c, _, a in NUMBER_ACTIONS if a.type in (int, float)]
    assert loose == []
    flags = {(c, a.option_strings[-1]) for c, _, a in NUMBER_ACTIONS}
    # the flags the brief names, on the commands that have them
    for want in [("figure", "--layer"), ("figure", "--batch-index"), ("figure", "--frame"), ("figure", "--vmax"),
                 ("figure", "--max-tokens"), ("open", "--layer"), ("open", "--head"), ("extract", "--generate"),
                 ("figure", "--max-memory"), ("train", "--steps")]:  # fmt: skip
        assert want in flags, want


@pytest.mark.parametrize("value", NOT_ASCII)
def test_number_flags_refuse_other_digits(value, capsys):
    """Each number flag of each command refuses the value in one argparse line naming the flag and the value."""
    for command, parser, action in NUMBER_ACTIONS:
        n = action.nargs if isinstance(action.nargs, int) else 1
        flag = action.option_strings[-1]
        with pytest.raises(SystemExit) as e:
            parser.parse_known_args([flag, *[value] * n])
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert e.value.code == 2 and len(lines) == 1, (command, flag, err)
        assert f"argument {'/'.join(action.option_strings)}: {value!r} is not" in lines[0], (command, flag, err)
        assert "digits 0-9" in lines[0]


@pytest.mark.parametrize("text", ["0", "12", "-3", "+4", " 7 ", "007"])
def test_whole_reads_ascii_as_int_does(text):
    assert whole(text) == int(text)


@pytest.mark.parametrize("text", ["0.5", "-1", ".5", "1.", "1e-3", "2E+2", " 3.25 ", "nan", "-inf"])
def test_decimal_reads_ascii_as_float_does(text):
    got, want = decimal(text), float(text)
    assert got == want or (got != got and want != want)  # nan: left to the flag's own range check


@pytest.mark.parametrize("text", ["", "-", "1-2", "0x10", "1e", "e3", "1 2", "１", "1__0", "²"])
def test_not_numbers_refused(text):
    with pytest.raises(ValueError):
        whole(text)
    with pytest.raises(ValueError):
        decimal(text)


def test_too_many_digits_said_as_such():
    with pytest.raises(ValueError, match=r"far too large; give at most 100 digits"):
        whole("9" * 101)
    assert whole("9" * 100) == int("9" * 100)


def test_figure_forms_of_their_own(capsys):
    """--span / --key-span / --layers LO-HI and --head H,H read each number with the same rule."""
    figure = dict(_sub("figure"))
    cases = [("--span", "1_0-2_0"), ("--span", "٣-٥"), ("--key-span", "0-١"), ("--layers", "0-١"), ("--head", "0,١")]
    for flag, value in cases:
        with pytest.raises(SystemExit):
            figure["figure"].parse_known_args([flag, value])
        line = capsys.readouterr().err.strip()
        assert f"argument {flag}" in line and repr(value) in line, line
    ok = figure["figure"].parse_known_args(["--span", "10-20", "--head", "0,3", "--layers", "1-2"])[0]
    assert (ok.span, ok.head, ok.layers) == ([10, 20], [0, 3], (1, 2))


def _sub(name):
    top = build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return [(name, sub.choices[name])]


def test_heads_forms_ascii_only():
    """ablate / compare --heads 'STACK KIND LAYER:HEAD': the layer and head in ASCII digits (re's \\d took '٣')."""
    from attnviz.runtime.ablation import HEAD_RE, LAYER_RE

    assert HEAD_RE.match("encoder self 3:1") and LAYER_RE.match("encoder self 3:*")
    assert not HEAD_RE.match("encoder self ٣:١") and not LAYER_RE.match("encoder self ٣:*")


def test_top_and_size_ascii_only():
    from attnviz.corpus.config import heads_shown

    assert heads_shown("5") == 5
    for bad in ("١", "1_0"):
        with pytest.raises(argparse.ArgumentTypeError):
            heads_shown(bad)


def test_block_index_ascii_only():
    """--block '٠' is no block index (int() read it as 0): it is looked up as a name, and no block has it."""
    from attnviz import AttnvizError
    from attnviz.figures.select import resolve_block
    from attnviz.figures.sources import load_result

    model = Path(__file__).resolve().parents[1] / "models" / "sequence-classification.onnx"
    result = load_result(model=model, text="7 2 9 5")
    assert resolve_block(result, "0")[0] == 0
    with pytest.raises(AttnvizError, match="no block '٠'"):
        resolve_block(result, "٠")


@pytest.mark.parametrize(
    "argv, words",
    [
        (["figure", "--span", "1_0-2_0"], ("argument --span", "'1_0-2_0'")),
        (["open", "--size", "١٤٠٠x900"], ("--size", "use WxH")),
        (["align", "--head", "١:٠"], ("--head", "LAYER:HEAD")),
        (["open", "--layer", "٣"], ("argument --layer", "'٣' is not a whole number in the digits 0-9")),
    ],
)
def test_cli_one_line(argv, words, tmp_path):
    """As a user runs it: one line, exit 2, no traceback."""
    model = "models/sequence-classification.onnx"
    extra = {"figure": ["--text", "7 2 9 5", "--out", tmp_path / "f.pdf"],
             "open": ["--text", "7 2 9 5", "--screenshot", tmp_path / "s.png"],
             "align": ["--src", tmp_path / "src.txt", "--out", tmp_path / "a.txt"]}[argv[0]]  # fmt: skip
    (tmp_path / "src.txt").write_text("7 2 9 5\n")
    from cli_run import REPO

    rc, err = run_cli(argv[0], model, *argv[1:], *extra, cwd=REPO, env={"QT_QPA_PLATFORM": "offscreen"})
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert all(w in lines[0] for w in words), lines[0]


def test_every_decimal_flag_keeps_its_text():
    """Each decimal flag of each command reads a number that remembers how it was typed, so its refusal can show it
    (``--width-in 1e400`` was shown as 'width inf in', ``--width-in -3`` as '-3.0', ``--font-size 0.00001`` as
    '1e-05'); the value still equals what ``float()`` reads, and survives pickling to a worker process."""
    import pickle

    from attnviz.core.numbers import AsTyped, spelled

    decimals = [(c, p, a) for c, p, a in NUMBER_ACTIONS if a.type is not whole_arg]
    assert {("figure", "--width-in"), ("figure", "--font-size"), ("extract", "--max-seconds")} <= {
        (c, a.option_strings[-1]) for c, _, a in decimals
    }
    for text in ("0.0000001", "1e400", "-3", "1.50"):
        for command, _, action in decimals:
            value = action.type(text)
            assert value == float(text) and spelled(value) == text, (command, action.option_strings, value)
            back = pickle.loads(pickle.dumps(value))
            assert isinstance(back, AsTyped) and back.text == text and back == float(text)


@pytest.mark.parametrize(
    "argv, shown",
    [
        (["--width-in", "1e400"], "width 1e400 in"),
        (["--font-size", "0.00001"], "font size 0.00001"),
        (["--keep", "1.50"], "keep 1.50"),
    ],  # fmt: skip
)
def test_figure_refusals_show_the_number_as_typed(argv, shown, tmp_path):
    """The figure's style checks (spec.check_style) name the number as typed and the flag that sets it."""
    from cli_run import REPO

    from attnviz import AttnvizError
    from attnviz.cli import error_line
    from attnviz.figures.command import run as figure_run

    args = build_parser().parse_args(
        [
            "figure",
            str(REPO / "models/sequence-classification.onnx"),
            "--text",
            "7 2",
            "--out",
            str(tmp_path / "f.pdf"),
            *argv,
        ]
    )
    with pytest.raises(AttnvizError) as e:
        figure_run(args)
    line = error_line(e.value)
    assert shown in line and f"(see {argv[0]})" in line, line
    assert not (tmp_path / "f.pdf").exists()
