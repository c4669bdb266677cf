"""``open``/``extract``/analyze ``--max-tokens`` over a sentence pair (session 17): the tokens kept are exactly those
the Hugging Face ``tokenizers`` library's own ``longest_first`` truncation keeps, for a BERT-style tokenizer.json
(``[CLS] A [SEP] B [SEP]``, its BertProcessing) and a RoBERTa-style one (``<s> A </s></s> B </s>``, its
RobertaProcessing); a corpus run's example of the same pair reads exactly what ``open`` shows; the run's note says
which sentence lost how many tokens (counted by the library); refusals stay one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx_builders import tiny_text_model
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from attnviz.cli import main
from attnviz.corpus.output import read
from attnviz.runtime import open_model

WORDS = [f"w{i}" for i in range(12)]
STYLES = {
    "bert": (["[PAD]", "[CLS]", "[SEP]"], processors.BertProcessing, 3),  # specials, post-processor, in a pair
    "roberta": (["<pad>", "<s>", "</s>"], processors.RobertaProcessing, 4),
}


def _tokenizer(style: str) -> Tokenizer:
    """A word-level Hugging Face tokenizer (one token a word, ids as listed) with ``style``'s own pair processor."""
    special, processor, _ = STYLES[style]
    vocab = special + WORDS
    t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token=special[0]))
    t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    t.post_processor = processor((special[2], 2), (special[1], 1))
    t.add_special_tokens(special)
    return t


@pytest.fixture(scope="module", params=sorted(STYLES))
def encoder(request, tmp_path_factory):
    """(style, model path, tokenizer.json path): a tiny encoder over the style's vocabulary, its tokenizer beside."""
    style = request.param
    d = tmp_path_factory.mktemp(f"pair_{style}")
    _tokenizer(style).save(str(d / "tokenizer.json"))
    return style, tiny_text_model(d / "model.onnx", vocab=STYLES[style][0] + WORDS), d / "tokenizer.json"


def _pair(la: int, lb: int) -> tuple[str, str]:
    """Sentence A of ``la`` words and B of ``lb`` (different words, so where each was cut shows)."""
    return " ".join(WORDS[:la]), " ".join(WORDS[12 - lb :])


def _library_cut(style: str, a: str, b: str, n: int):
    """What the tokenizers library keeps of the pair at ``max_length=n``, ``longest_first``: its encoding, and how
    many tokens of A and of B it keeps (its own sequence ids tell the sentences apart)."""
    t = _tokenizer(style)
    t.enable_truncation(n, strategy="longest_first")
    enc = t.encode(a, b)
    seq = [s for s in enc.sequence_ids if s is not None]
    return enc, seq.count(0), seq.count(1)


def test_analyze_keeps_the_tokens_hugging_face_tokenizers_keep(encoder):
    """Every (|A|, |B|, N) from the smallest N that keeps a token of each sentence to one past the pair's length:
    ties, one side shorter than half and both past half included."""
    style, path, tok = encoder
    fixed = STYLES[style][2]
    model = open_model(path, provider="cpu", tokenizer=str(tok))
    checked = 0
    for la in range(1, 8):
        for lb in range(1, 8):
            a, b = _pair(la, lb)
            for n in range(fixed + 2, la + lb + fixed + 2):
                want, _, _ = _library_cut(style, a, b, n)
                r = model.analyze(text=a, text_pair=b, max_tokens=n)
                assert r.tokens.labels == want.tokens, (la, lb, n)
                assert r.tokens.special == [bool(s) for s in want.special_tokens_mask], (la, lb, n)
                assert r.maps[0].shape[-1] == len(want.ids)
                checked += 1
    assert checked > 250


@pytest.mark.parametrize("la, lb, n", [(7, 3, 9), (3, 7, 9), (6, 6, 10), (8, 2, 8)])
def test_extract_writes_the_library_tokens_and_a_note_of_each_sentences_loss(encoder, tmp_path, la, lb, n):
    style, path, tok = encoder
    a, b = _pair(la, lb)
    want, ka, kb = _library_cut(style, a, b, n)
    out = tmp_path / "maps.npz"
    argv = ["extract", path, "--tokenizer", tok, "--text", a, "--text-pair", b, "--max-tokens", n, "--out", out]
    assert main([str(x) for x in argv]) == 0
    with np.load(out) as z:
        assert list(z["tokens"]) == want.tokens and z["attn_000"].shape[-1] == n
        notes = json.loads(str(z["info"]))["notes"]
    total = la + lb + STYLES[style][2]
    assert (
        f"{total} tokens truncated to {n} (--max-tokens {n}): sentence A lost {la - ka} of its {la} tokens, "
        f"sentence B {lb - kb} of its {lb}" in " | ".join(notes)
    )
    assert (la - ka) + (lb - kb) == total - n


def test_a_corpus_example_of_a_pair_reads_what_open_shows(encoder, tmp_path):
    """The same pairs through ``attnviz corpus --text-pair-column b --max-tokens N``: each example's text and pair,
    tokenized again without any cut, are exactly the tokens ``open`` (analyze) shows of the whole pair cut to N."""
    style, path, tok = encoder
    n = 9
    pairs = [_pair(la, lb) for la, lb in [(7, 3), (3, 7), (6, 6), (2, 2), (5, 4), (1, 8)]]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"text": a, "b": b}) + "\n" for a, b in pairs))
    argv = ["corpus", path, "--texts", tmp_path / "p.jsonl", "--text-pair-column", "b", "--max-tokens", n]
    argv += ["--out", tmp_path / "out", "--tokenizer", tok, "--workers", 1, "--top-k", len(pairs)]
    assert main([str(x) for x in (*argv, "--provider", "cpu", "--no-progress")]) == 0
    examples = read(tmp_path / "out").examples
    assert {e["item"] for e in examples} == set(range(len(pairs)))
    model = open_model(path, provider="cpu", tokenizer=str(tok))
    plain = _tokenizer(style)
    for e in examples:
        a, b = pairs[e["item"]]
        shown = model.analyze(text=a, text_pair=b, max_tokens=n).tokens.labels
        assert plain.encode(e["text"], e["pair"]).tokens == shown, (a, b, e["text"], e["pair"])
        _, ka, kb = _library_cut(style, a, b, n)
        assert (e["text"], e["pair"]) == (" ".join(a.split()[:ka]), " ".join(b.split()[:kb]))


def _with_positions(src: Path, dst: Path, n: int) -> Path:
    """The model with ``attnviz.max_positions`` = ``n`` in its metadata (its positions stop there)."""
    m = onnx.load(str(src))
    m.metadata_props.add(key="attnviz.max_positions", value=str(n))
    onnx.save(m, str(dst))
    return dst


def test_a_pair_past_the_positions_is_refused_naming_the_flag_which_then_cuts_it(encoder, tmp_path, capsys):
    style, path, tok = encoder
    limited = _with_positions(path, tmp_path / "limited.onnx", 8)
    a, b = _pair(5, 4)
    base = ["extract", limited, "--tokenizer", tok, "--text", a, "--text-pair", b, "--out", tmp_path / "m.npz"]
    assert main([str(x) for x in base]) == 2
    err = capsys.readouterr().err.strip()
    total = 9 + STYLES[style][2]
    assert (
        err == f"attnviz: error: {total} tokens; this model's positions stop at 8 (metadata); use --max-tokens 8 "
        "to truncate"
    )
    assert main([str(x) for x in (*base, "--max-tokens", 8)]) == 0
    with np.load(tmp_path / "m.npz") as z:
        assert list(z["tokens"]) == _library_cut(style, a, b, 8)[0].tokens


def test_max_tokens_too_small_for_a_pair_is_one_line(encoder, tmp_path, capsys):
    """N below the special tokens and one token of each sentence: refused (no sentence is dropped whole)."""
    style, path, tok = encoder
    fixed = STYLES[style][2]
    argv = ["extract", path, "--tokenizer", tok, "--text", "w0 w1 w2 w3", "--text-pair", "w9 w10 w11"]
    assert main([str(x) for x in (*argv, "--max-tokens", fixed + 1, "--out", tmp_path / "m.npz")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"attnviz: error: --max-tokens {fixed + 1} leaves no token of one sentence of this pair (its {fixed} special "
        f"tokens stay); give --max-tokens {fixed + 2} or more"
    )
    assert not (tmp_path / "m.npz").exists()


def test_a_pair_whose_sentences_cannot_be_told_apart_is_one_line(tmp_path, capsys):
    """The metadata vocabulary's tokenizer reads a typed [SEP] as its special token: the pair's words no longer add
    up to its two sentences', so where A ends is unknown and ``open`` refuses to guess, as ``corpus`` does."""
    path = tiny_text_model(tmp_path / "vocab.onnx")  # no tokenizer.json: [CLS] A B [SEP] from its metadata
    argv = ["extract", path, "--text", "the [SEP] cat sat on the mat", "--text-pair", "a dog ran home"]
    assert main([str(x) for x in (*argv, "--max-tokens", 6, "--out", tmp_path / "m.npz")]) == 2
    err = capsys.readouterr().err.strip()
    assert "special token typed in the text" in err and "--max-tokens" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "m.npz").exists()
