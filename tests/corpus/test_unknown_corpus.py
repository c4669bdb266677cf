"""A corpus in a language the tokenizer does not read (runtime/unknown_tokens.py): its items are mostly the unknown
token, and every statistic is of [UNK] maps.  `attnviz corpus` counts the items mostly of it (half or more of an
item's own tokens), records the count in run.json and says it once at the end; counted here by hand from each
line's words against the vocabulary, in both engines, and for an encoder-decoder's sources (the Greek demo fed
English)."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from planted import VOCAB, corpus_lines, planted_model

from attnviz.cli import main
from attnviz.corpus.run import CorpusConfig, run_corpus

UNK = VOCAB.index("home")  # the planted vocabulary's last word becomes its unknown token
KNOWN = set(VOCAB[3:]) - {"home"}
TRANSLATION = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"


@pytest.fixture(scope="module")
def unk_model(tmp_path_factory) -> Path:
    """The planted encoder with an unknown token named in its metadata (a word it does not know reads as it)."""
    path = planted_model(tmp_path_factory.mktemp("unk") / "planted.onnx")
    m = onnx.load(str(path))
    for p in m.metadata_props:
        if p.key == "attnviz.vocab":
            p.value = json.dumps([*VOCAB[:UNK], "[UNK]", *VOCAB[UNK + 1 :]])
        if p.key == "attnviz.special":
            p.value = json.dumps({"pad": 0, "cls": 1, "sep": 2, "unk": UNK})
    onnx.save(m, str(path))
    return path


def _lines() -> list[str]:
    """Known sentences, foreign ones (all unknown), and mixes on either side of half unknown."""
    known = [s.replace("home", "cat") for s in corpus_lines(12)]
    return [*known, "zz yy xx", "the zz", "the cat zz", "zz yy the cat", "zz yy xx the", "qq", *known[:3]]


def _mostly_by_hand(lines: list[str]) -> int:
    return sum(sum(w not in KNOWN for w in s.split()) * 2 >= len(s.split()) for s in lines)


def test_a_corpus_mostly_of_unknown_words_is_counted_in_run_json_and_said_once(unk_model, tmp_path, capsys):
    lines = _lines()
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(lines) + "\n")
    want = _mostly_by_hand(lines)
    assert want == 5  # "zz yy xx", "the zz", "zz yy the cat", "zz yy xx the", "qq"
    out = tmp_path / "out"
    args = ["corpus", str(unk_model), "--texts", str(texts), "--out", str(out), "--no-progress", "--workers", "1"]
    assert main([*args, "--batch-size", "4"]) == 0
    run = json.loads((out / "run.json").read_text())
    assert (run["items_mostly_unknown"], run["unknown_token"], run["items"]) == (want, "[UNK]", len(lines))
    err = capsys.readouterr().err
    assert [x for x in err.splitlines() if "unknown token" in x] == [
        f"attnviz: note: {want} of {len(lines)} items are mostly the unknown token '[UNK]' (words the tokenizer "
        "does not know): is the corpus in the model's language and script?"
    ]


def test_a_corpus_in_the_models_language_gets_a_zero_and_no_note(unk_model, tmp_path, capsys):
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join([*_lines()[:12], "the cat zz"]) + "\n")  # one unknown word in three: not mostly
    out = tmp_path / "out"
    cfg = CorpusConfig(model=str(unk_model), out=str(out), texts=str(texts), workers=1, progress=False)
    assert run_corpus(cfg).note is None
    assert json.loads((out / "run.json").read_text())["items_mostly_unknown"] == 0
    assert "unknown token" not in capsys.readouterr().err


def test_a_tokenizer_without_an_unknown_token_is_not_counted(planted, tmp_path):
    model, texts = planted  # refuses an unknown word instead: nothing to count
    out = tmp_path / "out"
    run_corpus(CorpusConfig(model=str(model), out=str(out), texts=str(texts), workers=1, progress=False))
    assert "items_mostly_unknown" not in json.loads((out / "run.json").read_text())


def test_english_sources_into_the_greek_translation_demo_are_counted(tmp_path):
    texts = tmp_path / "en.txt"
    texts.write_text("the cat sat on the mat\nthis is english\nμακάριοι οἱ καθαροὶ τῇ καρδίᾳ\n")
    out = tmp_path / "out"
    s = run_corpus(
        CorpusConfig(model=str(TRANSLATION), out=str(out), texts=str(texts), workers=1, generate=2, progress=False)
    )
    run = json.loads((out / "run.json").read_text())
    assert (run["items_mostly_unknown"], run["items"]) == (2, 3)  # the two English lines; the Greek one is read
    assert s.note is not None and s.note.startswith("2 of 3 items are mostly the unknown token '[UNK]'")


@pytest.mark.usefixtures("ray_local")
def test_the_ray_engine_counts_as_the_local_one(unk_model, tmp_path):
    lines = _lines()
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(lines) + "\n")
    out = tmp_path / "ray"
    cfg = CorpusConfig(
        model=str(unk_model), out=str(out), texts=str(texts), engine="ray", threads=1, batch_size=4, progress=False
    )
    s = run_corpus(cfg)
    run = json.loads((out / "run.json").read_text())
    assert (run["engine"], run["items_mostly_unknown"], run["unknown_token"]) == (
        "ray",
        _mostly_by_hand(lines),
        "[UNK]",
    )
    assert s.note is not None and s.note.startswith(f"{_mostly_by_hand(lines)} of {len(lines)} items")
