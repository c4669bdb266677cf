"""A refusal or a note a window's run raises names the window's field, or what its user can do there, never a flag
it has no place to type; the same run on the command line (``extract``, and ``open --screenshot``, whose message is
its command's own line) names the flags as it always did.  The real window and runtime on the shipped demo model and
a tiny BERT-style pair model (tests/onnx_builders.py), against the command line's own line for the same run."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run_cli
from gui_helpers import open_and_wait, run_and_wait

from attnviz.cli import main

pytest.importorskip("onnxruntime")
MODELS = Path(__file__).resolve().parents[2] / "models"
MODEL = MODELS / "sequence-classification.onnx"
SAMPLE = "7 2 9 5 1 8 6 3"  # its own sample (resources/samples): eight tokens
PREFIX = "attnviz: error: "
CAP_GB = "0.0001"  # 0.1 MB: under the demo's ~0.3 MB run


def cli_line(capsys, *argv) -> str:
    assert main([str(a) for a in argv]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(PREFIX), lines
    return lines[0][len(PREFIX) :]


def own_process_line(*argv) -> str:
    """The command's one line from an interpreter of its own: ``--max-memory`` caps the process and the children it
    starts (a crash-isolation child kept for later runs would keep a 0.1 MB arena in this one)."""
    code, err = run_cli(*argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(PREFIX), (code, lines)
    return lines[0][len(PREFIX) :]


def test_the_memory_refusal_names_the_cap_as_the_window_sets_it(qtbot, real_window, tmp_path, monkeypatch):
    w = real_window
    open_and_wait(qtbot, w, MODEL, text=SAMPLE)
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", CAP_GB)  # as `attnviz open --max-memory` starts the window
    with qtbot.waitSignal(w.error_shown, timeout=60000) as shown:
        w.inputs.run_button.click()
    window = shown.args[0]
    extract = own_process_line("extract", MODEL, "--text", SAMPLE, "--max-memory", CAP_GB, "--out", tmp_path / "m.npz")
    shot = own_process_line("open", MODEL, "--text", SAMPLE, "--max-memory", CAP_GB, "--screenshot", tmp_path / "s.png")
    assert extract.startswith("sequence-classification.onnx: running it on input_ids [1, 8]")
    assert f"(--max-memory {CAP_GB}); " in extract
    assert extract.endswith("or raise the cap with --max-memory 1 (or ATTNVIZ_MAX_MEMORY=1) if this machine has it")
    assert shot == extract  # the screenshot's message is its command's line: the flags it was given
    assert "--" not in window
    assert window == extract.replace(f"(--max-memory {CAP_GB})", "(set when attnviz started)").replace(
        "raise the cap with --max-memory 1 (or ATTNVIZ_MAX_MEMORY=1)",
        "raise the memory cap to 1 GB (start attnviz with ATTNVIZ_MAX_MEMORY=1)",
    )
    assert not (tmp_path / "m.npz").exists()


def test_the_cut_note_names_max_tokens_as_the_panel_labels_it(qtbot, real_window, capsys, tmp_path):
    w = real_window
    open_and_wait(qtbot, w, MODEL, text=SAMPLE)
    run_and_wait(qtbot, w, max_tokens=3)
    notes = [v for v in w.sidebar.values("Run").values() if "truncated" in v]
    assert len(notes) == 1 and "--" not in notes[0], notes
    assert "tokens truncated to the first 3 (max tokens 3)" in notes[0]
    assert w.inputs.form.labelForField(w.inputs.max_tokens).text() == "max tokens"  # the words the note says
    out = tmp_path / "m.npz"
    assert main(["extract", str(MODEL), "--text", SAMPLE, "--max-tokens", "3", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "tokens truncated to the first 3 (--max-tokens 3)" in err  # the command line's note: its flag


@pytest.fixture
def pair_model(tmp_path):
    """A tiny encoder and a BERT-style word-level tokenizer.json beside it ([CLS] A [SEP] B [SEP]: 3 specials)."""
    from onnx_builders import VOCAB, tiny_text_model
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="[PAD]"))
    t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    t.post_processor = processors.BertProcessing(("[SEP]", 2), ("[CLS]", 1))
    t.add_special_tokens(VOCAB[:3])
    t.save(str(tmp_path / "tokenizer.json"))
    return tiny_text_model(tmp_path / "pair.onnx")


def test_a_cut_that_leaves_a_sentence_nothing_names_max_tokens(qtbot, real_window, capsys, tmp_path, pair_model):
    w = real_window
    open_and_wait(qtbot, w, pair_model, text="the cat sat on the mat", text_pair="a dog ran home")
    w.inputs.set_values(max_tokens=4)
    with qtbot.waitSignal(w.error_shown, timeout=60000) as shown:
        w.inputs.run_button.click()
    argv = ["extract", pair_model, "--text", "the cat sat on the mat", "--text-pair", "a dog ran home"]
    cli = cli_line(capsys, *argv, "--max-tokens", 4, "--out", tmp_path / "m.npz")
    assert cli == (
        "--max-tokens 4 leaves no token of one sentence of this pair (its 3 special tokens stay); give --max-tokens 5 "
        "or more"
    )
    assert shown.args[0] == (
        "max tokens 4 leaves no token of one sentence of this pair (its 3 special tokens stay); set max tokens to 5 "
        "or more"
    )
    assert w.marked_widget is w.inputs.max_tokens  # the field it names is the one framed


def test_beams_without_generate_is_worded_by_the_window(real_window):
    """The panel sends beams only with a generation; a request built in the window's words says the fields."""
    from attnviz import AttnvizError
    from attnviz.core.setting_words import worded
    from attnviz.runtime.request import AnalyzeRequest

    with pytest.raises(AttnvizError) as e, worded(real_window.wording):
        AnalyzeRequest(text="x", beams=3)
    assert str(e.value) == "beams 3 searches a generation; set generate to 1 or more too (or beams to 1)"
    with pytest.raises(AttnvizError) as e:
        AnalyzeRequest(text="x", beams=3)
    assert str(e.value) == "--beams 3 searches a generation; give --generate N too (or drop --beams)"


@pytest.mark.parametrize("suffix", [".npz", ".png"])
def test_an_export_into_a_missing_folder_names_no_flag(qtbot, real_window, capsys, tmp_path, suffix):
    """File ▸ Export maps / view into a folder that is not there: the dialog chose the file, so the refusal says
    what to choose, not the `--out` the same write names on the command line."""
    w = real_window
    open_and_wait(qtbot, w, MODEL, text=SAMPLE)
    target = tmp_path / "gone" / f"maps{suffix}"
    with qtbot.waitSignal(w.error_shown, timeout=60000) as shown:
        (w.export_maps if suffix == ".npz" else w.export_view)(target)
    assert shown.args[0].startswith(f"cannot write {target}: ") and "--" not in shown.args[0], shown.args[0]
    assert not target.parent.exists()
    command = ["extract", MODEL, "--text", SAMPLE] if suffix == ".npz" else ["figure", MODEL, "--text", SAMPLE]
    cli = cli_line(capsys, *command, "--out", target)
    assert cli.startswith(f"cannot write {target}: ") and "--out" in cli  # the command line's: its flag
