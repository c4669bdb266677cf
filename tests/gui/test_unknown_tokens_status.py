"""English typed into the Greek→English translation demo: every token is [UNK]; the status bar says so first (the
sidebar's Run notes list it whole), and a text in the model's language shows only the maps' line."""

from __future__ import annotations

import json
from pathlib import Path

from gui_helpers import open_and_wait, run_and_wait
from tokenizers import Tokenizer

from attnviz.runtime.unknown_tokens import MARK

TRANSLATION = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"


def test_the_status_bar_says_a_text_of_unknown_tokens(qtbot, real_window):
    w = real_window
    open_and_wait(qtbot, w, TRANSLATION, text="the cat sat on the mat", generate=2)
    own = Tokenizer.from_str(w.session.model.metadata["attnviz.tokenizer"])  # the library's own count
    ids = own.encode("the cat sat on the mat", add_special_tokens=False).ids
    k = ids.count(own.token_to_id(own.model.unk_token))
    message = w.statusBar().currentMessage()
    assert message.startswith(f"note: {k} of {len(ids)} tokens of the text {MARK} '[UNK]'")
    assert message.endswith(
        f"· {len(w.session.result.maps)} attention maps, generated “{' '.join(w.session.result.generated)}”"
    )
    sample = json.loads(w.session.model.metadata["attnviz.sample"])["text"]
    run_and_wait(qtbot, w, text=sample, generate=2)
    assert w.statusBar().currentMessage().startswith(f"{len(w.session.result.maps)} attention maps")
