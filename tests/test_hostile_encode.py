"""Tokenizers that load but fail on a text, built here with tokenizers' own Python API, and texts no tokenizer
takes: every path that encodes (extract, corpus, compare, the window's worker through ``open --screenshot``, a
gold corpus's words) says what is wrong with the tokenizer or the text and the fix in one line, exit 2 — never the
library's own words (a Rust panic's "index out of bounds…", "WordLevel error: Missing [UNK] token…",
"TextInputSequence must be str"), which the test takes from tokenizers itself on the same text."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from onnx_builders import tiny_text_model
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.runtime import inputs as ip
from attnviz.runtime.align import encode_words

ROOT = Path(__file__).resolve().parents[1]
VOCAB = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "the": 3, "cat": 4, "sat": 5}  # the tiny model's first ids
TEXT = "the dog sat"  # "dog": a word none of the hostile vocabularies has


def _words(model) -> Tokenizer:
    t = Tokenizer(model)
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    return t


def no_unk(kind: str) -> Tokenizer:
    """A model whose unknown token (the stand-in for a word it has no token for) is not in its vocabulary."""
    build = {
        "WordLevel": lambda: models.WordLevel(VOCAB, unk_token="[UNK]"),
        "WordPiece": lambda: models.WordPiece(VOCAB, unk_token="[UNK]"),
        "BPE": lambda: models.BPE({c: k for k, c in enumerate(["[PAD]", *"thesado"])}, [], unk_token="[UNK]"),  # no "g"
    }
    return _words(build[kind]())


def unigram_without_unk() -> Tokenizer:
    return _words(models.Unigram([(w, -1.0) for w in VOCAB], None, False))


def template_reading_b() -> Tokenizer:
    """A post_processor whose one-text template reads the second text: tokenizers panics (Rust) on any text."""
    t = _words(models.WordLevel({**VOCAB, "[UNK]": 6}, unk_token="[UNK]"))
    t.post_processor = processors.TemplateProcessing(single="[CLS] $B", pair="$A $B", special_tokens=[("[CLS]", 1)])
    return t


def good() -> Tokenizer:
    return _words(models.WordLevel({**VOCAB, "[UNK]": 6}, unk_token="[UNK]"))


# name -> (tokenizer, text, the plain words its line must hold)
CASES = {
    "wordlevel_no_unk": (lambda: no_unk("WordLevel"), TEXT, ["WordLevel model", "'dog'", "unknown token '[UNK]'"]),
    "wordpiece_no_unk": (lambda: no_unk("WordPiece"), TEXT, ["WordPiece model", "'dog'", "unknown token '[UNK]'"]),
    "bpe_no_unk": (lambda: no_unk("BPE"), TEXT, ["BPE model", "'dog'", "unknown token '[UNK]'"]),
    "unigram_no_unk": (unigram_without_unk, TEXT, ["Unigram model", "unk_id"]),
    "template_b": (template_reading_b, "the cat", ["post_processor", "$B", "single"]),
    "surrogate": (good, "the \udcff cat", ["U+DCFF", "character 5", "UTF-8"]),  # bytes that were not UTF-8
}


def library_words(tok: Tokenizer, text: str) -> str:
    """What tokenizers itself says on this text (a panic's message, an exception's)."""
    try:
        tok.encode(text)
    except BaseException as e:  # a Rust panic is a BaseException
        return str(e)
    raise AssertionError("the case does not make tokenizers fail")


def check_line(err: str, name: str, tok: Tokenizer) -> None:
    _, text, words = CASES[name]
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("attnviz: error:"), err
    assert "Traceback" not in err and "panicked" not in err and "backtrace" not in err, err
    lib = library_words(tok, text)
    assert lib and lib not in err, (lib, err)
    for w in words:
        assert w in err, (w, err)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return tiny_text_model(tmp_path_factory.mktemp("m") / "model.onnx")


def saved(tmp_path: Path, name: str) -> tuple[Tokenizer, Path]:
    tok = CASES[name][0]()
    path = tmp_path / f"{name}.json"
    tok.save(str(path))
    return tok, path


@pytest.mark.parametrize("name", sorted(CASES))
def test_extract(model, tmp_path, capfd, name):
    tok, path = saved(tmp_path, name)
    out = tmp_path / "o.npz"
    rc = main(["extract", str(model), "--text", CASES[name][1], "--tokenizer", str(path), "--out", str(out)])
    err = capfd.readouterr().err  # the file descriptor's: a panic's report would be written there, not to sys.stderr
    assert rc == 2
    check_line(err, name, tok)
    assert ("(see --text)" if name == "surrogate" else "(see --tokenizer)") in err
    assert not out.exists()


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("command", ["corpus", "compare"])
def test_corpus_and_compare_name_the_item(model, tmp_path, capfd, name, command):
    tok, path = saved(tmp_path, name)
    texts = tmp_path / "texts.jsonl"  # a JSON escape is how a lone surrogate reaches a corpus
    text = CASES[name][1].replace("\udcff", "\\udcff")
    texts.write_text(f'{{"text": "the sat"}}\n{{"text": "{text}"}}\n')
    models_ = [str(model)] if command == "corpus" else [str(model), str(model)]
    args = [command, *models_, "--texts", str(texts), "--tokenizer", str(path), "--out", str(tmp_path / "out")]
    rc = main([*args, "--no-progress"])
    err = capfd.readouterr().err
    assert rc == 2
    check_line(err, name, tok)
    assert "corpus item" in err and "(see --text)" not in err  # the item is the corpus file's, not a --text


@pytest.mark.parametrize("name", ["template_b", "wordpiece_no_unk"])
def test_the_windows_worker_says_it_in_one_line(model, tmp_path, name):
    """``attnviz open --screenshot``: the window's message (its worker thread encodes) as the CLI's line, exit 2, and
    nothing else on the terminal: a panic's report on the worker thread is kept off it too.  (A text that is not
    UTF-8 does not reach the worker: the window's text box holds U+FFFD in its place, shown to the user.)"""
    tok, path = saved(tmp_path, name)
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    r = subprocess.run(
        [sys.executable, "-m", "attnviz", "open", str(model), "--text", CASES[name][1], "--tokenizer", str(path)]
        + ["--screenshot", str(tmp_path / "s.png")],
        capture_output=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 2, err
    check_line(err, name, tok)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_encode_of_the_tokenizer_says_the_same(name):
    """The paths a corpus and a gold corpus take (one batch, a text without labels, a pre-split sentence's words)
    give the one line the window and extract give."""
    make, text, words = CASES[name]
    tok = ip.HFTokenizer(make(), "hostile.json")
    said = set()
    for encode in (
        lambda: tok.encode(text),
        lambda: tok.encode_ids(text),
        lambda: tok.encode_many([text]),
        lambda: encode_words(tok, text.split(), special=True),
    ):
        with pytest.raises(AttnvizError) as e:
            encode()
        said.add(str(e.value))
    assert len(said) == 1, said
    check_line(f"attnviz: error: {said.pop()}", name, make())


def test_encodes_on_many_threads_at_once_keep_panics_off_the_terminal_and_give_it_back(capfd):
    """The window's worker and a corpus's threads encode off the main thread, several at once: each panic's report
    stays off stderr, each caller gets its one line, and stderr (fd 2) is the terminal's again after (threads that
    each saved and restored fd 2 themselves would leave /dev/null there when two overlapped)."""
    import threading

    tok = ip.HFTokenizer(template_reading_b(), "hostile.json")
    start = threading.Barrier(8, timeout=60)
    said: list[str] = []

    def encode() -> None:
        start.wait()
        for _ in range(20):
            try:
                tok.encode("the cat")
            except AttnvizError as e:
                said.append(str(e))

    threads = [threading.Thread(target=encode) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    os.write(2, b"still the terminal\n")
    err = capfd.readouterr().err
    assert err == "still the terminal\n", err
    assert len(said) == 160 and len(set(said)) == 1 and "$B" in said[0]
