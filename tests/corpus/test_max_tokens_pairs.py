"""``--max-tokens N`` over sentence pairs, encoder-decoder sources and targets, and under ``--engine ray`` (session
17).  Each run is checked against a hand computation: the same corpus cut by hand (words, one token a word) must give
the very same statistics without the flag, and its texts are the examples'.  Which side of a pair loses tokens is
asked of the Hugging Face ``tokenizers`` library itself (its ``longest_first`` truncation), never of attnviz."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from planted import VOCAB, corpus_lines
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from attnviz.cli import main
from attnviz.corpus.cut import cut
from attnviz.corpus.output import read
from attnviz.runtime.inputs import HFTokenizer

TRANSLATION = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"


def _corpus(model, texts, out, *extra):
    argv = ["corpus", model, "--texts", texts, "--out", out, "--workers", "1", "--batch-size", "4"]
    return main([str(a) for a in (*argv, "--provider", "cpu", "--no-progress", *extra)])


def _same_statistics(a, b) -> None:
    ra, rb = read(a), read(b)
    assert len(ra.heads) == len(rb.heads) > 0
    for x, y in zip(ra.heads, rb.heads):
        assert x.keys() == y.keys()
        for k, v in x.items():
            same = (isinstance(v, float) and np.isnan(v) and np.isnan(y[k])) or v == y[k]
            assert same, (k, v, y[k])
    assert ra.examples and [(e["text"], e["pair"]) for e in ra.examples] == [
        (e["text"], e["pair"]) for e in rb.examples
    ]


def _word_tokenizer(words: list[str], pair: str) -> Tokenizer:
    """A word-level Hugging Face tokenizer over ``words`` (ids as listed) with the pair template ``pair``."""
    t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[PAD]"))
    t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    t.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair=pair,
        special_tokens=[("[CLS]", words.index("[CLS]")), ("[SEP]", words.index("[SEP]"))],
    )
    return t


def _kept_by_tokenizers(t: Tokenizer, a: str, b: str, n: int) -> tuple[int, int]:
    """(A's, B's) tokens that tokenizers' own longest_first truncation to ``n`` keeps (type ids tell them apart)."""
    t.enable_truncation(n, strategy="longest_first")
    enc = t.encode(a, b)
    t.no_truncation()
    words = [ty for ty, sp in zip(enc.type_ids, enc.special_tokens_mask) if not sp]
    return words.count(0), words.count(1)


def test_a_pair_is_cut_as_hugging_face_tokenizers_truncate_it():
    """Every (|A|, |B|, N), ties and one side shorter than half included: the ids kept are the ids the tokenizers
    library keeps, and the text read is each sentence's first words."""
    words = ["[PAD]", "[CLS]", "[SEP]", *(f"w{i}" for i in range(12))]
    t = _word_tokenizer(words, "[CLS] $A [SEP] $B:1 [SEP]:1")
    ours = HFTokenizer.from_str(t.to_str(), "test")
    checked = 0
    for la in range(1, 9):
        for lb in range(1, 9):
            a, b = " ".join(words[3 : 3 + la]), " ".join(words[12 - lb + 3 : 15])
            enc = ours.encode_ids(a, b)
            for n in range(5, la + lb + 3):
                t.enable_truncation(n, strategy="longest_first")
                want = t.encode(a, b)
                t.no_truncation()
                keep, got = cut(ours, a, b, np.array(enc.special, bool), n)
                assert np.array(enc.ids)[keep].tolist() == want.ids, (la, lb, n)
                assert np.array(enc.type_ids)[keep].tolist() == want.type_ids
                ka, kb = _kept_by_tokenizers(t, a, b, n)
                assert (got.text, got.pair) == (" ".join(a.split()[:ka]), " ".join(b.split()[:kb]))
                checked += 1
    assert checked > 300


def _pairs_corpus(path, n=24):
    """``n`` pairs of 1..8 words a sentence: some fit N_PAIR, some lose words of one sentence, some of both."""
    rng = np.random.default_rng(5)
    a, b = ([" ".join(x.split()[: rng.integers(1, 9)]) for x in corpus_lines(n, seed=s)] for s in (3, 4))
    path.write_text("".join(json.dumps({"text": x, "b": y}) + "\n" for x, y in zip(a, b)))
    return list(zip(a, b))


N_PAIR = 9  # [CLS] + 7 words of the two sentences + [SEP]: the planted vocabulary tokenizer's pair form


def _hand_cut_pairs(pairs, path):
    """Each pair cut to N_PAIR tokens by hand: the tokenizers library says how many words of each sentence stay
    (a word-level tokenizer with the planted vocabulary's pair form, [CLS] A B [SEP], B typed 1)."""
    t = _word_tokenizer(VOCAB, "[CLS] $A $B:1 [SEP]:1")
    out = []
    for a, b in pairs:
        ka, kb = _kept_by_tokenizers(t, a, b, N_PAIR)
        out.append((" ".join(a.split()[:ka]), " ".join(b.split()[:kb])))
    path.write_text("".join(json.dumps({"text": x, "b": y}) + "\n" for x, y in out))
    return out


def test_pairs_are_cut_longest_first_and_give_the_statistics_of_the_hand_cut_pairs(planted, tmp_path):
    model, _ = planted
    pairs = _pairs_corpus(tmp_path / "long.jsonl")
    cut_pairs = _hand_cut_pairs(pairs, tmp_path / "cut.jsonl")
    assert (
        _corpus(model, tmp_path / "long.jsonl", tmp_path / "a", "--text-pair-column", "b", "--max-tokens", N_PAIR) == 0
    )
    assert _corpus(model, tmp_path / "cut.jsonl", tmp_path / "b", "--text-pair-column", "b") == 0
    _same_statistics(tmp_path / "a", tmp_path / "b")
    assert all((e["text"], e["pair"]) == cut_pairs[e["item"]] for e in read(tmp_path / "a").examples)
    run = json.loads((tmp_path / "a" / "run.json").read_text())
    want = sum(len(a.split()) + len(b.split()) + 2 > N_PAIR for a, b in pairs)
    both = sum(x != a and y != b for (x, y), (a, b) in zip(cut_pairs, pairs))
    assert 0 < want < len(pairs) and both > 0  # some pairs fit, some lose words of both sentences
    assert run["max_tokens"] == N_PAIR and run["items_truncated"] == want and "longest" in run["truncation"]
    assert run["tokens"] == sum(len(x.split()) + len(y.split()) + 2 for x, y in cut_pairs)


def test_ray_cuts_pairs_in_its_tokenise_step_as_the_local_plan(planted, tmp_path, ray_local):
    model, _ = planted
    pairs = _pairs_corpus(tmp_path / "long.jsonl")
    cut_pairs = _hand_cut_pairs(pairs, tmp_path / "cut.jsonl")
    extra = ("--text-pair-column", "b")
    assert (
        _corpus(model, tmp_path / "long.jsonl", tmp_path / "a", *extra, "--max-tokens", N_PAIR, "--engine", "ray") == 0
    )
    assert _corpus(model, tmp_path / "cut.jsonl", tmp_path / "b", *extra) == 0
    ra, rb = read(tmp_path / "a"), read(tmp_path / "b")
    assert len(ra.heads) == len(rb.heads) > 0
    for x, y in zip(ra.heads, rb.heads):  # Ray pads its own batches: equal within 1e-6, as test_ray.py's runs
        for k, v in x.items():
            if isinstance(v, float) and not np.isnan(v):
                assert abs(v - y[k]) <= 1e-6, (k, v, y[k])
            else:
                assert v == y[k] or (isinstance(v, float) and np.isnan(y[k])), k
    assert ra.examples and all((e["text"], e["pair"]) == cut_pairs[e["item"]] for e in ra.examples)
    run = json.loads((tmp_path / "a" / "run.json").read_text())
    want = sum(len(a.split()) + len(b.split()) + 2 > N_PAIR for a, b in pairs)
    assert run["engine"] == "ray" and run["max_tokens"] == N_PAIR and run["items_truncated"] == want
    assert run["tokens"] == sum(len(x.split()) + len(y.split()) + 2 for x, y in cut_pairs)


def _one_token_words(tok, n: int, seed: int) -> list[str]:
    """``n`` words of ``tok``'s vocabulary that it reads as one token each (so a cut by hand counts words)."""
    vocab = sorted(w for w in tok.tok.get_vocab() if w.isalpha() and len(w) > 2)
    rng = np.random.default_rng(seed)
    out: list[str] = []
    for w in rng.permutation(vocab).tolist():
        if len(tok.encode_ids(w, None, add_special=False).ids) == 1:
            out.append(w)
        if len(out) == n:
            return out
    raise AssertionError("too few one-token words")


N_SRC = 5


def test_sources_and_targets_are_cut_and_give_the_statistics_of_the_hand_cut_pairs(tmp_path):
    """translation.onnx: its source tokenizer adds no special token, so a source keeps its first N words; the
    decoder reads its start token and the target's first N - 1 words."""
    from attnviz.runtime import open_model

    src_tok, tgt_tok = open_model(TRANSLATION, provider="cpu").tokenizers
    sw, tw = _one_token_words(src_tok, 30, 0), _one_token_words(tgt_tok, 30, 1)
    rng = np.random.default_rng(2)
    pairs = [
        (" ".join(rng.choice(sw, int(rng.integers(2, 9)))), " ".join(rng.choice(tw, int(rng.integers(2, 9)))))
        for _ in range(14)
    ]
    assert all(len(src_tok.encode_ids(a, None).ids) == len(a.split()) for a, _ in pairs)  # no special token added
    (tmp_path / "long.jsonl").write_text("".join(json.dumps({"text": a, "en": b}) + "\n" for a, b in pairs))
    cut_pairs = [(" ".join(a.split()[:N_SRC]), " ".join(b.split()[: N_SRC - 1])) for a, b in pairs]
    (tmp_path / "cut.jsonl").write_text("".join(json.dumps({"text": a, "en": b}) + "\n" for a, b in cut_pairs))
    extra = ("--text-pair-column", "en")
    assert _corpus(TRANSLATION, tmp_path / "long.jsonl", tmp_path / "a", *extra, "--max-tokens", N_SRC) == 0
    assert _corpus(TRANSLATION, tmp_path / "cut.jsonl", tmp_path / "b", *extra) == 0
    _same_statistics(tmp_path / "a", tmp_path / "b")
    assert all((e["text"], e["pair"]) == cut_pairs[e["item"]] for e in read(tmp_path / "a").examples)
    run = json.loads((tmp_path / "a" / "run.json").read_text())
    src_cut = sum(len(a.split()) > N_SRC for a, _ in pairs)
    tgt_cut = sum(len(b.split()) + 1 > N_SRC for _, b in pairs)  # + the decoder's start token
    either = sum(len(a.split()) > N_SRC or len(b.split()) + 1 > N_SRC for a, b in pairs)
    assert 0 < src_cut < len(pairs) and 0 < tgt_cut < len(pairs) and either > max(src_cut, tgt_cut)
    assert (run["sources_truncated"], run["targets_truncated"], run["items_truncated"]) == (src_cut, tgt_cut, either)
    assert run["max_tokens"] == N_SRC and "source" in run["truncation"] and "target" in run["truncation"]


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--max-tokens", "3"], "--max-tokens 3 leaves no token of one sentence"),
        (["--max-tokens", "0"], "--max-tokens must be 1 or more"),
    ],
)
def test_pair_refusals_are_one_line(planted, tmp_path, capsys, extra, words):
    model, _ = planted
    _pairs_corpus(tmp_path / "p.jsonl")
    assert _corpus(model, tmp_path / "p.jsonl", tmp_path / "out", "--text-pair-column", "b", *extra) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1 and not (tmp_path / "out").exists()


def test_without_targets_only_the_sources_are_cut_and_the_decoder_reads_its_generation(tmp_path):
    """No --text-pair-column: each source is cut (its first N words), and the decoder generates from it as from the
    hand-cut source; run.json counts the sources cut and names no target."""
    from attnviz.runtime import open_model

    src_tok, _ = open_model(TRANSLATION, provider="cpu").tokenizers
    sw = _one_token_words(src_tok, 30, 6)
    rng = np.random.default_rng(7)
    sources = [" ".join(rng.choice(sw, int(rng.integers(2, 9)))) for _ in range(8)]
    (tmp_path / "long.txt").write_text("".join(s + "\n" for s in sources))
    cut_sources = [" ".join(s.split()[:N_SRC]) for s in sources]
    (tmp_path / "cut.txt").write_text("".join(s + "\n" for s in cut_sources))
    assert _corpus(TRANSLATION, tmp_path / "long.txt", tmp_path / "a", "--generate", 3, "--max-tokens", N_SRC) == 0
    assert _corpus(TRANSLATION, tmp_path / "cut.txt", tmp_path / "b", "--generate", 3) == 0
    _same_statistics(tmp_path / "a", tmp_path / "b")
    examples = read(tmp_path / "a").examples
    assert all(e["text"] == cut_sources[e["item"]] and e["pair"] is None for e in examples)
    assert [e["generated"] for e in examples] == [e["generated"] for e in read(tmp_path / "b").examples]
    run = json.loads((tmp_path / "a" / "run.json").read_text())
    want = sum(len(s.split()) > N_SRC for s in sources)
    assert 0 < want < len(sources) and run["items_truncated"] == run["sources_truncated"] == want
    assert "targets_truncated" not in run and "generates" in run["truncation"]


def test_a_pair_whose_sentences_cannot_be_told_apart_is_one_line_naming_it(planted, tmp_path, capsys):
    """The vocabulary tokenizer reads a typed [SEP] as its special token: the pair's words no longer add up to its
    two sentences', so where one sentence ends is unknown and the cut is refused rather than guessed."""
    model, _ = planted
    f = tmp_path / "p.jsonl"
    rows = [{"text": "the cat", "b": "a dog"}, {"text": "the [SEP] cat sat on the mat", "b": "a dog ran home"}]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert _corpus(model, f, tmp_path / "out", "--text-pair-column", "b", "--max-tokens", 6) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "corpus item 1 (line 2)" in err and "special token typed" in err
    assert not (tmp_path / "out").exists()
