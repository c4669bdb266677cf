"""A mistyped flag is reported in one line naming the subcommand it was given to (not the top-level parser) and
where its usage is, as every other refusal is one line."""

from __future__ import annotations

import pytest

from attnviz.cli import main


@pytest.mark.parametrize(
    "argv,prog",
    [
        (["figure", "models/translation.onnx", "--txet", "x", "--out", "f.pdf"], "attnviz figure"),
        (["extract", "m.onnx", "--bogus", "--out", "o.npz"], "attnviz extract"),
        (["m.onnx", "--screnshot", "x.png"], "attnviz open"),  # plain `attnviz MODEL ...` is `open`
    ],
)
def test_unknown_flag_shows_the_subcommands_usage(argv, prog, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    bad = next(a for a in argv if a.startswith("--") and a not in ("--out",))
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"{prog}: error: unrecognized arguments: {bad}") and err.rstrip().endswith(
        f"see '{prog} --help'"
    )


def test_a_known_flag_missing_its_value_is_still_the_subcommands_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["extract", "m.onnx", "--out"])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.splitlines() == [
        "attnviz extract: error: argument --out: expected one argument; see 'attnviz extract --help'"
    ]


@pytest.mark.parametrize(
    "argv,missing",
    [(["extract", "m.onnx"], "--out"), (["compare", "a.onnx", "--out", "d"], "B"), (["inspect"], "MODEL")],
)
def test_a_missing_argument_is_one_line_naming_it(argv, missing, capsys):
    """argparse printed its usage block (8-12 lines) before the problem; now the problem and where the usage is."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    prog = f"attnviz {argv[0]}"
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"{prog}: error: the following arguments are required: {missing}"), err
    assert err.rstrip().endswith(f"see '{prog} --help'"), err


@pytest.mark.parametrize("command", ["ablate", "compare"])
def test_a_second_image_is_refused_where_a_command_takes_one(command, capsys, tmp_path):
    """argparse's default keeps the last ``--image`` and drops the first without a word: a lost input."""
    argv = [command, "m.onnx", "--image", "a.png", "--image", "b.png", "--out", str(tmp_path / "o")]
    argv += ["--heads", "0.0"] if command == "ablate" else ["b.onnx"]  # compare reads a model B
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert f"attnviz {command}: error: --image given twice: give it once" in err, err
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize(
    "argv,flag",
    [
        # (--text repeats since clip26: a dual encoder's candidate texts; a model that reads one text refuses
        # several in one line, tests/runtime/test_dual_scores.py)
        (["extract", "m.onnx", "--text-pair", "first", "--text-pair", "second", "--out", "o.npz"], "--text-pair"),
        (["extract", "m.onnx", "--text", "t", "--out", "a.npz", "--out=b.npz"], "--out"),
        (["figure", "m.onnx", "--text", "t", "--dp", "100", "--dpi", "200", "--out", "f.pdf"], "--dpi"),  # a prefix
        (
            ["m.onnx", "--text-pair", "first", "--text-pair", "second"],
            "--text-pair",
        ),  # plain `attnviz MODEL ...` is `open`
    ],
)
def test_a_single_value_flag_given_twice_is_refused(argv, flag, capsys, tmp_path, monkeypatch):
    """argparse keeps the last of a repeated flag and drops the first without a word: a lost input."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert f"error: {flag} given twice: give it once" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing written


def test_flags_that_take_several_still_do(tmp_path, capsys):
    """--image on extract reads several images: given twice it is a list, not refused (the model is missing, so the
    command stops at the model with its own line)."""
    assert main(["extract", str(tmp_path / "m.onnx"), "--image", "a.png", "--image", "b.png", "--out", "o.npz"]) == 2
    assert "given twice" not in capsys.readouterr().err


@pytest.mark.parametrize(("typed", "meant"), [("inspct", "inspect"), ("extrct", "extract"), ("corpsu", "corpus")])
def test_a_misspelt_command_is_named_with_the_one_meant(typed, meant, tmp_path, monkeypatch, capsys):
    """`attnviz inspct MODEL` became `open inspct MODEL`, and argparse said "attnviz open: error: unrecognized
    arguments: MODEL", naming neither the typo nor the command (audit25).  The suggestion is a real command."""
    from attnviz.cli import build_parser

    monkeypatch.chdir(tmp_path)  # no file of that name here
    assert main([typed, "model.onnx"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"attnviz: error: no command '{typed}'; did you mean 'attnviz {meant}'?")
    assert meant in build_parser(meant)._subparsers._group_actions[0].choices  # type: ignore[union-attr]


def test_a_word_near_no_command_or_a_file_of_that_name_still_opens(tmp_path, monkeypatch, capsys):
    """Only a near miss of a command's name is refused: another word is a model for `open` (which names the Hub's
    way for it), and a file or folder called like a command's misspelling is left to `open` as before."""
    from attnviz.cli import _misspelt_command

    monkeypatch.chdir(tmp_path)
    assert main(["nonsense"]) == 2
    assert "no such file or folder here" in capsys.readouterr().err
    assert _misspelt_command("inspct") is not None
    (tmp_path / "inspct").mkdir()
    assert _misspelt_command("inspct") is None
    assert _misspelt_command("model.onnx") is None and _misspelt_command("--text") is None


@pytest.mark.parametrize("command", ["compare", "ablate"])
@pytest.mark.parametrize("top", ["-1", "x"])
def test_a_negative_or_non_number_top_is_refused(command, top, capsys, tmp_path):
    """``--top -1`` printed no heads (compare) or all but the last (ablate's slice), with exit 0."""
    argv = [command, "models/translation.onnx", "--top", top, "--out", str(tmp_path / "o")]
    argv += ["--heads", "0.0"] if command == "ablate" else ["models/translation.onnx"]
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"attnviz {command}: error: argument --top: "), err
    assert not any(tmp_path.iterdir())


def test_top_zero_still_runs(tmp_path, capsys):
    """0 is a number of heads: the summary prints none (the outputs are written as for any K)."""
    out = tmp_path / "o"
    code = main(
        [
            "compare",
            "models/translation.onnx",
            "models/translation.onnx",
            "--top",
            "0",
            "--text",
            "a b",
            "--out",
            str(out),
        ]
    )
    assert code == 0 and (out / "heads.parquet").is_file()


def test_top_zero_prints_no_header_over_no_heads(tmp_path, capsys):
    """Two models whose heads moved (two seeds) and an ablation: --top 0 printed the ranking's header with no line
    under it; the tables hold every head."""
    import pyarrow.parquet as pq
    from onnx_builders import tiny_text_model

    a = tiny_text_model(tmp_path / "a.onnx", layers=1, heads=2, d=8, seed=1)
    b = tiny_text_model(tmp_path / "b.onnx", layers=1, heads=2, d=8, seed=2)
    argv = ["--text", "the cat sat", "--top", "0"]
    assert main(["compare", str(a), str(b), *argv, "--out", str(tmp_path / "c")]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("compared 2 heads of 1 site") and "most changed" not in printed
    assert main(["ablate", str(a), *argv, "--all-heads", "--out", str(tmp_path / "d")]) == 0
    printed = capsys.readouterr().out
    assert "heads that matter most" not in printed and "base prediction:" in printed
    assert [len(pq.read_table(tmp_path / d / "heads.parquet")) for d in "cd"] == [2, 2]


@pytest.mark.parametrize(("command", "flag"), [("ablate", "--heads"), ("compare", "--figure-head")])
def test_head_flags_say_heads_count_from_0(command, flag, capsys):
    """A head spec's numbers count from 0 (the Overview's H0, the printed rows' 1:0): a researcher counting from 1
    named the wrong head with no word from the help."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out.split(f"\n  {flag} SPEC", 1)[1]  # the flag's own entry, not the usage line
    said = " ".join(text.split("\n  --", 1)[0].split())
    assert "counted from 0" in said
