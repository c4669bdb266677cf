"""A byte-level BPE's token labels are the text they stand for (GPT-2, RoBERTa, Llama 3, Qwen, Whisper).

Such a tokenizer stores a token's UTF-8 bytes as printable stand-ins ('é' is ``Ã©``, '注' is ``æ³¨``); shown as
stored, every accented letter, curly quote, CJK character or emoji read as mojibake in the window and in figures.
Checked against the tokenizers library's own decoder (Rust) and the text's own characters at the tokens' offsets.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from attnviz.runtime.inputs import HFTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "figures"))
from _pdftext import pdf_text

TEXT = "naïve café’s 注意力机制 الانتباه هو جوهر 🙂 done\nend"
TRAIN = [
    TEXT.replace("力", "").replace("🙂", "") * 20,
    "the cat sat on the mat " * 20,
]  # '力' and '🙂' left unmerged: split bytes


@pytest.fixture(scope="module")
def trained():
    from tokenizers import AddedToken, ByteLevelBPETokenizer

    tk = ByteLevelBPETokenizer()
    tk.train_from_iterator(TRAIN, vocab_size=400, min_frequency=2, special_tokens=["<|endoftext|>"])
    tk.add_tokens([AddedToken("naïve", normalized=False)])  # an added token is stored as written, not as bytes
    return tk._tokenizer


def test_labels_are_the_text_each_token_stands_for(trained):
    ours = HFTokenizer.from_str(trained.to_str(), "test")
    assert ours.byte_level
    enc = trained.encode(TEXT)
    labels = ours.encode(TEXT).tokens
    assert len(labels) == len(enc.ids)
    split = []  # (label, offsets) of the tokens holding part of a character
    added = trained.token_to_id("naïve")
    for tid, (a, b), label in zip(enc.ids, enc.offsets, labels):
        if tid == added:  # (the library's decoder reads it as bytes too: 'na�ve')
            assert label == "naïve"
            continue
        whole = trained.decode([tid])  # the library's ByteLevel decoder; U+FFFD where a character is split
        if "\ufffd" in whole:
            split.append((label, (a, b)))
        elif whole.strip():
            assert label == whole.strip(), (label, whole)
            assert label == TEXT[a:b].strip()  # the text at the token's own offsets
    assert {"naïve", "café", "’", "الانتباه", "جوهر", "\\n"} <= set(labels), labels
    # no byte stand-in left (a space alone keeps its 'Ġ', which the views draw as '␣', as before)
    assert not any(re.search("[ÃâæØðĠĊ]", s) for s in labels if s != "Ġ"), labels
    # a character split over tokens: each names its bytes, and together they are the character's UTF-8
    assert split, "the text should hold characters the tokenizer splits"
    runs: dict[tuple[int, int], bytes] = {}
    for label, span in split:
        assert re.fullmatch(r"(<0x[0-9A-F]{2}>)+", label), label
        runs[span] = runs.get(span, b"") + bytes(int(h, 16) for h in re.findall(r"<0x([0-9A-F]{2})>", label))
    for (a, b), data in runs.items():
        assert data.decode("utf-8") == TEXT[a:b].strip()
    assert {TEXT[a:b].strip() for a, b in runs} == {"力", "🙂"}


def test_the_vocabulary_label_of_an_id_reads_the_same(trained):
    ours = HFTokenizer.from_str(trained.to_str(), "test")
    enc = trained.encode(TEXT)
    assert [ours.label(i) for i in enc.ids] == ours.encode(TEXT).tokens  # generated tokens are labelled by id


def test_a_tokenizer_that_is_not_byte_level_keeps_its_tokens():
    from tokenizers import Tokenizer, models, pre_tokenizers

    tk = Tokenizer(models.WordLevel({"[UNK]": 0, "café": 1, "Ã©": 2, "æ": 3}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    ours = HFTokenizer.from_str(tk.to_str(), "test")
    assert not ours.byte_level
    assert ours.encode("café Ã© æ").tokens == ["café", "Ã©", "æ"]  # a word's own letters, never read as bytes


def test_a_figure_of_the_labels_prints_the_words(trained):
    """The figure's tick labels are the words, and its PDF holds them as text (its fonts' ToUnicode maps), not
    their byte stand-ins.  (Arabic is drawn shaped, right to left; the PDF lists its glyphs in drawing order, so it is
    checked on the axes' labels.)"""
    from figure_data import text_result

    from attnviz.figures import FigureSpec, figure_bytes, render_spec

    toks = HFTokenizer.from_str(trained.to_str(), "test").encode(TEXT).tokens
    keep = [t for t in toks if "<0x" not in t and not re.search("[\u4e00-\u9fff]", t)]  # DejaVu has no CJK
    fig = render_spec(text_result(n_layers=1, heads=1, tokens=keep), FigureSpec(dpi=72))
    ticks = {t.get_text() for t in fig.axes[0].get_yticklabels()}
    assert {"naïve", "café", "’", "الانتباه", "جوهر"} <= ticks, ticks
    texts = pdf_text(figure_bytes(fig, "pdf"))
    for word in ("naïve", "café", "’"):
        assert word in texts, (word, texts)
    assert not any(re.search("[ÃØâ]", t) for t in texts), texts
