"""The window's tokenizer dialog (File ▸ Choose tokenizer…): a tokenizer.json that does not load is one message
saying what the file is instead, never the Rust library's serde words, and the window opens the model again with a
good tokenizer afterwards (the CLI's half: tests/runtime/test_tokenizer_file_errors.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("onnxruntime")

from bad_tokenizers import RAW, write_case
from onnx_builders import tiny_text_model
from strict import strict
from tokenizers import Tokenizer, models, pre_tokenizers


@pytest.mark.parametrize("name", ["vocab_txt", "unknown_model"])
def test_a_bad_tokenizer_is_one_message(real_window, qtbot, tmp_path, name):
    win = real_window
    model = tiny_text_model(tmp_path / "model.onnx")
    with qtbot.waitSignal(win.result_shown, timeout=60000):
        win.open_path(model, text="the cat")
    tok, words = write_case(tmp_path, name)
    messages: list[str] = []
    win.error_shown.connect(messages.append)
    with strict():
        with qtbot.waitSignal(win.error_shown, timeout=60000):
            win.set_tokenizer(tok)  # what the dialog calls with the chosen file
        qtbot.waitUntil(lambda: not win.workers.live(), timeout=60000)
    assert len(messages) == 1, messages
    msg = messages[0]
    assert "\n" not in msg and "Traceback" not in msg and str(tok) in msg and words in msg.lower(), msg
    assert not any(r in msg.lower() for r in RAW), msg
    good = tmp_path / "good.json"  # a tokenizer within the tiny model's 12 ids
    t = Tokenizer(models.WordLevel({"[UNK]": 0, "the": 1, "cat": 2}, "[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    good.write_text(t.to_str())
    win.set_tokenizer(good)
    with qtbot.waitSignal(win.result_shown, timeout=60000):  # the window still works, with the good file
        win.open_path(model, text="the cat")
    assert win.session.result.tokens.labels == ["the", "cat"]


def test_choosing_a_tokenizer_with_max_tokens_set_reopens_and_keeps_the_cut(real_window, qtbot, tmp_path):
    """The reopen passed every input field to open_model, which takes no max tokens: a set max tokens raised
    TypeError in the slot (nothing reopened).  The spin box keeps its value and the rerun cuts to it."""
    win = real_window
    model = tiny_text_model(tmp_path / "model.onnx")
    with qtbot.waitSignal(win.result_shown, timeout=60000):
        win.open_path(model, text="the cat")
    good = tmp_path / "good.json"
    t = Tokenizer(models.WordLevel({"[UNK]": 0, "the": 1, "cat": 2}, "[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    good.write_text(t.to_str())
    win.inputs.set_values(max_tokens=1)
    with strict():
        with qtbot.waitSignal(win.result_shown, timeout=60000):
            win.set_tokenizer(good)
    assert win.session.result.tokens.labels == ["the"] and win.inputs.max_tokens.value() == 1
