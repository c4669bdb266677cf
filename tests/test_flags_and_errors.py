"""One meaning per flag across subcommands (old spellings still work, with a note), and errors that carry the
setting to fix (``AttnvizError.param``) which the CLI turns into a flag."""

from __future__ import annotations

import pickle

import pytest

from attnviz import AttnvizError
from attnviz.cli import PARAM_FLAGS, build_parser, error_line


@pytest.fixture(scope="module")
def parser():
    return build_parser()


@pytest.mark.parametrize("cmd", ["extract", "figure"])
def test_memory_flag_and_the_old_mode_spelling(parser, capsys, cmd):
    out = ["--out", "o.npz"]
    assert parser.parse_args([cmd, "m.onnx", *out, "--memory", "ondemand"]).mode == "ondemand"
    assert "deprecated" not in capsys.readouterr().err
    assert parser.parse_args([cmd, "m.onnx", *out, "--mode", "dense"]).mode == "dense"
    assert capsys.readouterr().err == "attnviz: note: --mode is deprecated here; use --memory\n"


def test_aggregate_flag_means_the_same_in_open_and_figure(parser, capsys):
    assert parser.parse_args(["open", "m.onnx", "--aggregate", "rollout"]).mode == "rollout"
    assert parser.parse_args(["figure", "m.onnx", "--aggregate", "max"]).agg == "max"
    assert parser.parse_args(["figure", "m.onnx", "--agg", "min"]).agg == "min"  # short form, same meaning
    assert "deprecated" not in capsys.readouterr().err
    assert parser.parse_args(["open", "m.onnx", "--mode", "mean"]).mode == "mean"
    assert capsys.readouterr().err == "attnviz: note: --mode is deprecated here; use --aggregate\n"
    with pytest.raises(SystemExit):  # memory modes are not aggregates
        parser.parse_args(["open", "m.onnx", "--aggregate", "ondemand"])


def test_error_line_names_the_flag_for_the_setting():
    assert error_line(AttnvizError("this model takes an image", param="image")) == (
        "attnviz: error: this model takes an image (see --image)"
    )
    assert error_line(AttnvizError("layer 9 is out of range; pass --layer 0..3", param="layer")).endswith("0..3")
    assert error_line(AttnvizError("plain")) == "attnviz: error: plain"
    assert set(PARAM_FLAGS) >= {"image", "text", "tokenizer", "layer", "head", "step", "aggregate", "output"}


def test_param_survives_pickling_from_a_worker_process():
    e = pickle.loads(pickle.dumps(AttnvizError("no tokenizer", param="tokenizer")))
    assert isinstance(e, AttnvizError) and e.param == "tokenizer" and str(e) == "no tokenizer"


def test_figure_errors_carry_the_setting_not_a_flag():
    pytest.importorskip("matplotlib")
    from attnviz.figures import FigureSpec

    with pytest.raises(AttnvizError) as ei:
        FigureSpec(head=1, agg="mean")
    assert ei.value.param == "aggregate" and "--" not in str(ei.value)


def test_cli_adds_the_flag_to_a_library_error(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    import numpy as np

    from attnviz.cli import main
    from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
    from attnviz.core.io import save_npz

    a = np.full((1, 2, 3, 3), 1 / 3, np.float32)
    r = AttentionResult(
        [DenseMap(a)], [SiteInfo("encoder", "self", 0, 2, "s", "softmax")], tokens=TokenAxis(["a", "b", "c"])
    )
    maps = save_npz(r, tmp_path / "m.npz")
    assert main(["figure", "--maps", str(maps), "--layer", "5", "--out", str(tmp_path / "f.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnviz: error: layer 5 is out of range") and "(see --layer)" in err


def test_ctrl_c_that_an_extension_import_turned_into_its_error_is_told_as_an_interrupt(monkeypatch, capsys):
    """A Ctrl-C that lands while a C extension initialises (export-hf importing torch / transformers) reaches the
    command as that import's ``ImportError: initialization failed``: it was reported as an internal error of
    attnviz (exit 1); it is the interrupt it was (exit 130).  An error with no Ctrl-C before it stays internal."""
    import os
    import signal

    from attnviz.cli import main
    from attnviz.runtime.commands import inspect

    def interrupted_import(args):
        try:
            os.kill(os.getpid(), signal.SIGINT)  # the terminal's Ctrl-C: Python's handler runs as the call returns
            raise AssertionError("the interrupt was not raised")
        except KeyboardInterrupt:  # what an extension's module init does with it
            raise ImportError("initialization failed") from None

    monkeypatch.setattr(inspect, "run", interrupted_import)
    assert main(["inspect", "m.onnx"]) == 130
    assert capsys.readouterr().err.strip() == "attnviz: interrupted"

    def plain_error(args):
        raise ImportError("initialization failed")

    monkeypatch.setattr(inspect, "run", plain_error)
    assert main(["inspect", "m.onnx"]) == 1
    assert "internal error (ImportError" in capsys.readouterr().err


def test_out_of_memory_names_the_memory_flag_not_opens_aggregation_flag(monkeypatch, capsys):
    """It said "--mode ondemand": --mode is `open`'s aggregation (ondemand is no choice of it) and extract's
    deprecated spelling of --memory."""
    from attnviz.cli import main
    from attnviz.runtime.commands import inspect

    def out_of_memory(args):
        raise MemoryError

    monkeypatch.setattr(inspect, "run", out_of_memory)
    assert main(["inspect", "m.onnx"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "attnviz: error: out of memory; use a smaller input (or --memory ondemand for long inputs)"
