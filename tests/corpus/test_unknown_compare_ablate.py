"""``attnviz compare … --texts`` and ``attnviz ablate … --texts`` count the items mostly of the tokenizer's unknown
token as ``attnviz corpus`` does (corpus/stream.py MostlyUnknown: one account for the three): run.json's
``items_mostly_unknown`` / ``unknown_token``, and one note at the end.  The count is made independently here with
the ``tokenizers`` library: a WordLevel tokenizer over the planted model's vocabulary, [UNK] in place of its last
word, each line's tokens counted as half or more [UNK]."""

from __future__ import annotations

import json
import shutil

import pytest
from planted import VOCAB, corpus_lines
from test_unknown_corpus import UNK, unk_model  # noqa: F401  (the fixture: the planted encoder naming [UNK])

from attnviz.cli import main

tokenizers = pytest.importorskip("tokenizers")
NOTE = "are mostly the unknown token '[UNK]' (words the tokenizer does not know)"


def _lines() -> list[str]:
    known = [s.replace("home", "cat") for s in corpus_lines(6)]
    return [*known, "zz yy xx", "the zz", "the cat zz", "zz yy the cat", "qq", "home"]


def _mostly_by_tokenizers(lines: list[str]) -> int:
    vocab = {w: i for i, w in enumerate([*VOCAB[:UNK], "[UNK]", *VOCAB[UNK + 1 :]])}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    unk = vocab["[UNK]"]
    counts = [(sum(i == unk for i in e.ids), len(e.ids)) for e in tok.encode_batch(lines)]
    return sum(k > 0 and 2 * k >= n for k, n in counts)


@pytest.fixture
def texts(tmp_path):
    lines = _lines()
    p = tmp_path / "c.txt"
    p.write_text("\n".join(lines) + "\n")
    want = _mostly_by_tokenizers(lines)
    # "zz yy xx", "the zz", "zz yy the cat", "qq", and "home" (the word the vocabulary gave up for [UNK])
    assert want == 5
    return p, len(lines), want


def _said_once(err: str, want: int, items: int) -> None:
    assert [x for x in err.splitlines() if "unknown token" in x] == [
        f"attnviz: note: {want} of {items} items {NOTE}: is the corpus in the model's language and script?"
    ]


def test_compare_over_texts_counts_and_says_it(unk_model, texts, tmp_path, capsys):  # noqa: F811
    path, items, want = texts
    b = tmp_path / "b.onnx"
    shutil.copy(unk_model, b)
    out = tmp_path / "cmp"
    args = ["compare", str(unk_model), str(b), "--texts", str(path), "--out", str(out), "--no-progress"]
    assert main([*args, "--workers", "1", "--batch-size", "4"]) == 0
    run = json.loads((out / "run.json").read_text())
    assert (run["items_mostly_unknown"], run["unknown_token"], run["items"]) == (want, "[UNK]", items)
    _said_once(capsys.readouterr().err, want, items)


def test_ablate_over_texts_counts_and_says_it(unk_model, texts, tmp_path, capsys):  # noqa: F811
    path, items, want = texts
    out = tmp_path / "abl"
    args = ["ablate", str(unk_model), "--texts", str(path), "--heads", "encoder self 0:0", "--out", str(out)]
    assert main([*args, "--no-progress", "--workers", "1", "--batch-size", "4"]) == 0
    run = json.loads((out / "run.json").read_text())
    assert (run["items_mostly_unknown"], run["unknown_token"], run["items"]) == (want, "[UNK]", items)
    _said_once(capsys.readouterr().err, want, items)


def test_a_known_corpus_gets_a_zero_and_no_note(unk_model, tmp_path, capsys):  # noqa: F811
    p = tmp_path / "k.txt"
    known = [s.replace("home", "cat") for s in corpus_lines(6)] + ["the cat zz"]  # one unknown in three
    assert _mostly_by_tokenizers(known) == 0
    p.write_text("\n".join(known) + "\n")
    out = tmp_path / "abl"
    args = ["ablate", str(unk_model), "--texts", str(p), "--heads", "encoder self 0:0", "--out", str(out)]
    assert main([*args, "--no-progress", "--workers", "1"]) == 0
    assert json.loads((out / "run.json").read_text())["items_mostly_unknown"] == 0
    assert "unknown token" not in capsys.readouterr().err
