"""words24 in the window: a vision–language model's Image regions buttons are named by the word each row produced
(a captioner's rule), so at generation step k the checked button reads generated word k, not the token before it;
a word the buttons bear twice reads "w (k)" on the button itself.  On a tiny random-init LLaVA (tests/vlm_models.py)
that generates, against the run's own generated words and tokens (read from the result, not from the view)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from gui_helpers import open_and_wait

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
pytest.importorskip("transformers")

TEXT = "a photo of the cat of the"  # "of" and "the" twice
PROMPT = f"<s> <image> {TEXT}"
GENERATE = 6


@pytest.fixture
def picture(tmp_path):
    from PIL import Image

    p = tmp_path / "pic.png"
    Image.fromarray((np.random.default_rng(4).random((32, 32, 3)) * 255).astype(np.uint8)).save(p)
    return p


def _read(w):
    """What the user reads: each button's text, the checked one's index, each tooltip."""
    bar = w.image_regions.query_bar
    checked = [i for i, b in enumerate(bar.buttons) if b.isChecked()]
    return [b.text() for b in bar.buttons], checked, [b.toolTip() for b in bar.buttons]


def test_each_step_checks_the_button_reading_its_word(qtbot, real_window, llava_repo, picture):
    from attnviz.core.view.labels import clean_label

    w = real_window
    open_and_wait(qtbot, w, llava_repo, text=PROMPT, image=str(picture), generate=GENERATE)
    w.select_view("image")
    r = w.session.result
    words = [clean_label(x) for x in r.generated]
    assert len(words) >= 2
    labels = r.key_tokens.labels  # the decoder's tokens (the result's own, not the view's)
    assert [str(t) for t in labels[r.prompt_len - 7 : r.prompt_len]] == TEXT.split()
    first = r.prompt_len - 1  # the prompt's last token ("the") chose the first word
    texts, _, tips = _read(w)
    # by hand from the run: the text rows after the image produced the prompt's next tokens "photo of the cat of
    # the", then the generated words; a word the buttons bear twice carries its place, as the title's (word k)
    produced = TEXT.split()[1:] + words
    counts = Counter(produced)
    assert texts == [f"{x} ({k + 1})" if counts[x] > 1 else x for k, x in enumerate(produced)]
    assert texts[:6] == ["photo", "of (2)", "the (3)", "cat", "of (5)", "the (6)"]
    assert len(set(texts)) == len(texts)  # no two buttons look alike
    from PySide6.QtGui import QFont, QFontMetrics

    for b in w.image_regions.query_bar.buttons:  # a checked (bold) label is never clipped ("photc")
        bold = QFont(b.font())
        bold.setBold(True)
        assert b.minimumWidth() >= QFontMetrics(bold).horizontalAdvance(b.text()), b.text()
    assert tips[5] == f"decoder row {first - 1}: reads “of”, produced “the”"
    assert tips[6] == f"decoder row {first}: reads “the”, produced “{words[0]}”"
    view = w.image_regions
    for step, word in enumerate(words):
        w.session.select(step=step)
        texts, checked, _ = _read(w)
        assert checked == [6 + step], (step, texts, checked)
        assert texts[checked[0]] in (word, f"{word} ({7 + step})")
        assert view.queries[view.query][1] == first + step  # the row that chose the word
        assert view.info.text().startswith(f"query “{word}”")
