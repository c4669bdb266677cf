"""A text the tokenizer does not know (runtime/unknown_tokens.py): English typed into the Greek→English translation
demo is all [UNK], and every map relates [UNK] to [UNK]; the run says so in one note, counted against the
tokenizer library's own encoding of the text, and a text in the model's language gets none."""

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from attnviz.cli import main
from attnviz.runtime import open_model
from attnviz.runtime.inputs import VocabTokenizer
from attnviz.runtime.unknown_tokens import MARK, unknown_note

TRANSLATION = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"
ENGLISH = "the cat sat on the mat"


@pytest.fixture(scope="module")
def demo():
    model = open_model(TRANSLATION, provider="cpu")
    own = Tokenizer.from_str(model.metadata["attnviz.tokenizer"])  # the library itself, not attnviz's wrapper
    return model, own


def _unknown(own: Tokenizer, text: str) -> tuple[int, int]:
    enc = own.encode(text, add_special_tokens=False)
    unk = own.token_to_id(own.model.unk_token)
    return sum(i == unk for i in enc.ids), len(enc.ids)


def test_an_english_text_into_the_greek_model_is_said_with_its_count(demo):
    model, own = demo
    k, n = _unknown(own, ENGLISH)
    assert k == n > 0  # the premise: the library makes every word [UNK]
    notes = [x for x in model.analyze(text=ENGLISH).info.get("notes", []) if MARK in x]
    assert notes == [
        f"{k} of {n} tokens of the text {MARK} '[UNK]' (words the tokenizer does not know): is the text in the "
        "model's language and script?"
    ]


def test_the_models_own_sample_text_gets_no_note(demo):
    model, own = demo
    sample = json.loads(model.metadata["attnviz.sample"])["text"]
    assert _unknown(own, sample)[0] < 0.5 * _unknown(own, sample)[1]
    assert not [x for x in model.analyze(text=sample).info.get("notes", []) if MARK in x]


def test_extract_prints_the_note_on_stderr_and_writes_the_maps(tmp_path, capsys):
    out = tmp_path / "m.npz"
    assert main(["extract", str(TRANSLATION), "--text", ENGLISH, "--out", str(out)]) == 0
    io = capsys.readouterr()
    assert [line for line in io.err.splitlines() if MARK in line] == [
        f"attnviz: note: 6 of 6 tokens of the text {MARK} '[UNK]' (words the tokenizer does not know): is the text "
        "in the model's language and script?"
    ]
    assert out.exists() and MARK not in io.out


@pytest.mark.parametrize(("words", "said"), [("a b zz", False), ("a zz yy", True), ("zz", True), ("a b", False)])
def test_half_or_more_of_the_texts_own_tokens_unknown_is_said(words, said):
    tok = VocabTokenizer(["[UNK]", "[CLS]", "[SEP]", "a", "b"], {"unk": 0, "cls": 1, "sep": 2})
    enc = tok.encode(words)  # [CLS] ... [SEP]: special, not counted
    note = unknown_note(tok, enc)
    assert (note is not None) == said
    if said:
        k = words.split().count("zz") + words.split().count("yy")
        assert note.startswith(f"{k} of {len(words.split())} tokens of the text {MARK} '[UNK]'")


def test_a_tokenizer_that_names_no_unknown_token_is_not_checked():
    tok = VocabTokenizer(["a", "b"], {})
    assert tok.unk_id is None and unknown_note(tok, tok.encode("a b")) is None


def test_the_corpus_count_over_flat_arrays_is_the_notes_verdict_item_by_item():
    # random items of a vocabulary whose unknown token is flagged special (as metadata's is): the vectorised count
    # over the flat arrays equals, item by item, whether unknown_note would speak
    import numpy as np

    from attnviz.runtime.unknown_tokens import items_mostly_unknown, mostly_unknown

    tok = VocabTokenizer(["[UNK]", "[CLS]", "[SEP]", "a", "b"], {"unk": 0, "cls": 1, "sep": 2})
    rng = np.random.default_rng(0)
    encs = [tok.encode(" ".join(rng.choice(["a", "b", "zz"], size=rng.integers(1, 6)))) for _ in range(300)]
    said = [unknown_note(tok, e) is not None for e in encs]
    assert 30 < sum(said) < 270  # both kinds present
    assert [mostly_unknown(0, e.ids, e.special) for e in encs] == said
    ids = np.concatenate([e.ids for e in encs])
    special = np.concatenate([e.special for e in encs]).astype(bool)
    counts = np.array([len(e.ids) for e in encs])
    assert items_mostly_unknown(0, ids, special, counts) == sum(said)


GREEK_THEN_ENGLISH = "μακάριοι οἱ πτωχοὶ " + ENGLISH  # 4 known tokens, then 6 unknown: the whole text is mostly [UNK]
ENGLISH_THEN_GREEK = "the cat sat μακάριοι οἱ πτωχοὶ τῷ πνεύματι ὅτι αὐτῶν ἐστιν ἡ βασιλεία τῶν οὐρανῶν"


@pytest.mark.parametrize(("text", "n"), [(GREEK_THEN_ENGLISH, 4), (ENGLISH_THEN_GREEK, 3)])
def test_after_max_tokens_the_note_counts_the_tokens_that_ran(demo, text, n):
    """The count is of the first N tokens that ran (this tokenizer adds no special token: the cut keeps the first
    N), counted with the library's own encoding: the whole text's verdict is the opposite in both cases."""
    model, own = demo
    enc = own.encode(text, add_special_tokens=False)
    unk = own.token_to_id(own.model.unk_token)
    whole, kept = sum(i == unk for i in enc.ids), sum(i == unk for i in enc.ids[:n])
    assert (whole >= 0.5 * len(enc.ids)) != (kept >= 0.5 * n)  # the premise: cutting flips the verdict
    notes = [x for x in model.analyze(text=text, max_tokens=n).info.get("notes", []) if MARK in x]
    if kept >= 0.5 * n:
        assert notes == [
            f"{kept} of {n} tokens of the text as --max-tokens cut it {MARK} '[UNK]' (words the tokenizer does not "
            "know): is the text in the model's language and script?"
        ]
    else:
        assert notes == []


SAMPLE_GREEK = "μακάριοι οἱ καθαροὶ τῇ καρδίᾳ ὅτι αὐτοὶ τὸν θεὸν ὄψονται"


@pytest.mark.parametrize("n", [None, 4])
def test_a_forced_target_the_decoder_does_not_know_is_said_naming_its_side(demo, n):
    """``--text-pair`` on the encoder–decoder is the teacher-forced target: Greek typed as the English target is all
    [UNK] by the target's own tokenizer (the library's count), said as the source text is, naming the decoder side,
    counted over the tokens that run (--max-tokens 4: the start token and the target's first 3); an English target
    gets none, and the Greek source no note of its own."""
    model, _ = demo
    target = Tokenizer.from_str(model.metadata["attnviz.target_tokenizer"])
    enc = target.encode(SAMPLE_GREEK, add_special_tokens=False)
    unk = target.token_to_id(target.model.unk_token)
    ids = enc.ids if n is None else enc.ids[: n - 1]
    k = sum(i == unk for i in ids)
    assert k >= 0.5 * len(ids) > 0  # the premise: the target's tokenizer knows no Greek
    notes = [
        x for x in model.analyze(text=SAMPLE_GREEK, text_pair=SAMPLE_GREEK, max_tokens=n).info["notes"] if MARK in x
    ]
    cut = "" if n is None else " as --max-tokens cut it"
    assert notes == [
        f"{k} of {len(ids)} tokens of the text pair (decoder side){cut} {MARK} '[UNK]' (words the tokenizer does not "
        "know): is the text in the model's language and script?"
    ]
    english = model.analyze(text=SAMPLE_GREEK, text_pair="blessed are the pure in heart")
    assert not [x for x in english.info.get("notes", []) if MARK in x]
