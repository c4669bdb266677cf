"""One request, one check: the window's input panel builds the same :class:`AnalyzeRequest` the CLI builds from the
equivalent flags, and a bad request gets the same refusal from `attnviz extract` as from the window, its fix named
in each one's words: the flag on the command line, the field (or what to do) in the window (the real panel and
worker path on the shipped demo models, not a stand-in)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnviz.cli import build_parser, main
from attnviz.core import preprocess
from attnviz.runtime.commands.common import request_from_args

pytest.importorskip("onnxruntime")
ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
PREFIX = "attnviz: error: "


def cli_error(capsys, *argv) -> str:
    """The one line `attnviz` prints for a refused command (exit code 2), without its prefix."""
    assert main(list(argv)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(PREFIX), lines
    return lines[0][len(PREFIX) :]


def flags_request(*argv):
    return request_from_args(build_parser().parse_args(["extract", *argv, "--out", "unused.npz"]))


def panel_for(qtbot, path):
    from attnviz.gui.widgets.input_panel import InputPanel
    from attnviz.runtime import open_model

    panel = InputPanel()
    qtbot.addWidget(panel)
    panel.configure_for(open_model(path))
    return panel


def test_the_panel_builds_the_request_the_flags_build(qtbot):
    model = MODELS / "translation.onnx"
    panel = panel_for(qtbot, model)
    panel.set_values(text="ἐν ἀρχῇ ἦν ὁ λόγος", text_pair="in the beginning", generate=3, max_tokens=7)
    want = flags_request(
        str(model), "--text", "ἐν ἀρχῇ ἦν ὁ λόγος", "--text-pair", "in the beginning", "--generate", "3"
    )
    assert panel.request() != want  # the panel's max tokens are part of its request
    want = flags_request(
        str(model),
        "--text",
        "ἐν ἀρχῇ ἦν ὁ λόγος",
        "--text-pair",
        "in the beginning",
        "--generate",
        "3",
        "--max-tokens",
        "7",
    )
    assert panel.request() == want


def test_the_panel_builds_the_image_request_the_flags_build(qtbot):
    model, image = MODELS / "vit-classification.onnx", ROOT / "resources" / "samples" / "vit-classification.png"
    panel = panel_for(qtbot, model)
    panel.set_values(image=str(image))
    assert panel.request() == flags_request(str(model), "--image", str(image))
    panel.preprocess.setCurrentIndex(panel.preprocess.findData("clip"))
    panel.image_size.setValue(48)
    mean, std = preprocess.stats("clip")
    flags = ["--image-size", "48", "48", "--image-mean", *map(repr, mean), "--image-std", *map(repr, std)]
    assert panel.request() == flags_request(str(model), "--image", str(image), *flags)
    assert panel.request().text is None  # a vision model's text box is off, as no --text is


def test_too_many_steps_same_line_from_cli_panel_and_window(qtbot, real_window, capsys, tmp_path, monkeypatch):
    from attnviz import AttnvizError

    model = MODELS / "translation.onnx"
    with qtbot.waitSignal(real_window.result_shown, timeout=60000):
        real_window.open_path(model, text="ἐν ἀρχῇ ἦν ὁ λόγος", generate=2)
    monkeypatch.setenv("ATTNVIZ_MAX_GENERATE", "3")
    cli = cli_error(capsys, "extract", str(model), "--text", "x", "--generate", "5", "--out", str(tmp_path / "o.npz"))
    assert "ATTNVIZ_MAX_GENERATE" in cli and not (tmp_path / "o.npz").exists()
    real_window.inputs.set_values(generate=5)
    with pytest.raises(AttnvizError) as e:
        real_window.inputs.request()  # outside the window's run: the command line's words
    assert str(e.value) == cli
    with qtbot.waitSignal(real_window.error_shown, timeout=10000) as sig:
        real_window.inputs.run_button.click()
    assert cli == "--generate: 5 steps is over the limit of 3 steps; ask for fewer --generate steps, or raise the " + (
        "limit with ATTNVIZ_MAX_GENERATE=5"
    )
    assert sig.args[0] == (
        "generate: 5 steps is over the limit of 3 steps; set generate lower, or raise the limit with "
        "ATTNVIZ_MAX_GENERATE=5"
    )


def test_negative_steps_same_line_from_extract_and_open(capsys, tmp_path):
    model = str(MODELS / "translation.onnx")
    extract = cli_error(capsys, "extract", model, "--text", "x", "--generate", "-1", "--out", str(tmp_path / "o.npz"))
    shot = str(tmp_path / "s.png")
    opened = cli_error(capsys, "open", model, "--text", "x", "--generate", "-1", "--screenshot", shot)
    assert extract == opened and "generate -1" in extract and "--generate" in extract
    assert not (tmp_path / "o.npz").exists() and not (tmp_path / "s.png").exists()


def test_no_input_same_line_from_cli_and_window(qtbot, real_window, capsys, tmp_path):
    model = MODELS / "sequence-classification.onnx"
    cli = cli_error(capsys, "extract", str(model), "--out", str(tmp_path / "o.npz"))
    assert cli.startswith("no input: sequence-classification.onnx takes text")
    with qtbot.waitSignal(real_window.result_shown, timeout=60000):
        real_window.open_path(model)  # its sample runs first
    real_window.inputs.text.clear()
    with qtbot.waitSignal(real_window.error_shown, timeout=60000) as sig:
        real_window.inputs.run_button.click()
    sample = "'7 2 9 5 1 8 6 3'"  # the model's own sample (resources/samples), shown as the CLI shows it
    assert (
        cli
        == f"no input: sequence-classification.onnx takes text; give --text (its sample: --text {sample}) or "
        + ("--inputs FEEDS.npz")
    )
    assert (
        sig.args[0]
        == f"no input: sequence-classification.onnx takes text; type one in the text box (its sample: {sample})"
    )


def test_cancelling_is_recognised_by_type_not_by_words(qtbot, window, files):
    """A worker whose job raises the runtime's Cancelled (whatever its words) ends quietly as "cancelled"; an error
    that merely reads "cancelled" is shown as the error it is."""
    from attnviz.runtime.errors import Cancelled

    with qtbot.waitSignal(window.workers.finished, timeout=10000):  # the signals are queued: set before they land
        window._latest["run"] = window.workers.start(_raise, Cancelled("stopped at step 3"), kind="run").request_id
    assert window.inputs.progress.format() == "cancelled" and window.last_error is None
    with qtbot.waitSignal(window.error_shown, timeout=10000) as sig:
        window._latest["run"] = window.workers.start(_raise, ValueError("cancelled"), kind="run").request_id
    assert "ValueError" in sig.args[0]


def _raise(exc):
    raise exc
