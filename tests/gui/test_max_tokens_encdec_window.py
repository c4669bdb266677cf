"""The window's max-tokens box on an encoder–decoder (session 17): a target past the model's positions offers the
Truncate button, which cuts the decoder's rows as ``extract --max-tokens`` and a corpus run do (the start token, then
the target's first N - 1 tokens, counted by the Hugging Face ``tokenizers`` library), and the Run notes say what each
side lost."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from gui_helpers import open_and_wait
from tokenizers import Tokenizer

TRANSLATION = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"
SOURCE = "μακάριοι οἱ καθαροὶ τῇ καρδίᾳ ὅτι αὐτοὶ τὸν θεὸν ὄψονται"
TARGET = "Blessed are the pure in heart, for they will see God. " * 12  # 13 tokens a verse: past 128 rows


def test_an_overlong_target_is_truncated_from_the_window_as_extract_cuts_it(qtbot, real_window):
    meta = {p.key: p.value for p in onnx.load(str(TRANSLATION), load_external_data=False).metadata_props}
    tgt = Tokenizer.from_str(meta["attnviz.target_tokenizer"]).encode(TARGET, add_special_tokens=False)
    assert len(tgt.ids) + 1 > 128
    w = real_window
    open_and_wait(qtbot, w, TRANSLATION)
    w.inputs.set_values(text=SOURCE, text_pair=TARGET, generate=0)
    with qtbot.waitSignal(w.error_shown, timeout=30000) as sig:
        w.run_analysis()
    assert sig.args[0] == (  # what was too long, as extract says it, and the fix in the window's words
        f"the text pair (decoder side): {len(tgt.ids) + 1} tokens; this model's positions stop at 128 (training "
        "config max_len); set max tokens to 128 to truncate"
    )
    button = next(b for b in w.error_box.buttons() if b.text() == "Truncate to 128 tokens")
    with qtbot.waitSignal(w.result_shown, timeout=30000):
        button.click()
    r = w.session.result
    cross = next(m for m, s in zip(r.maps, r.sites) if s.kind == "cross")
    assert np.shape(cross.array())[-2:] == (128, 12)  # every source token, 128 decoder rows
    assert r.decoder_ids[0][1:] == tgt.ids[:127]
    notes = r.info["notes"]
    assert any(
        f"the source lost 0 of its 12 tokens, the target's decoder rows {len(tgt.ids) + 1 - 128} of their "
        f"{len(tgt.ids) + 1}" in n
        for n in notes
    )
