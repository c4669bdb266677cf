"""``attnviz corpus --gold-column``: per cross-attention head AER, precision and recall over a parallel corpus.

The reference is ``attnviz align``'s own scoring (``runtime.align.score_test_set``): one unpadded run per pair,
its maps merged to words and scored by ``core.align``.  The corpus runs padded batches of several pairs and sums
link counts in its workers; the two must give the same numbers for every head, layer mean and the mean of all.
"""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from test_engines import _cfg, _table

from attnviz.cli import main
from attnviz.core import align
from attnviz.corpus import run_corpus
from attnviz.corpus.output import read
from attnviz.corpus.run import CHECKPOINT
from attnviz.runtime import open_model
from attnviz.runtime.align import score_test_set

TRANSLATION = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"


def _gold(folder: Path) -> dict:
    return json.loads((folder / "run.json").read_text())["gold"]


@pytest.mark.parametrize("convention", [None, "predict"])
def test_gold_scores_equal_attnviz_align_per_head_layer_and_mean(bible_gold, tmp_path, convention):
    out = tmp_path / "out"
    run_corpus(
        _cfg(
            TRANSLATION,
            bible_gold / "pairs.jsonl",
            out,
            pair_column="en",
            gold_column="gold",
            batch_size=5,
            convention=convention,
        )
    )
    want = score_test_set(open_model(TRANSLATION, provider="cpu"), bible_gold / "set.gold", convention)
    res = read(out)
    g = res.run["gold"]
    assert g["convention"] == want["convention"] == (convention or "input")  # the demo declares "input"
    assert g["skip_punctuation"] is want["skip_punctuation"] is True  # the Bible gold never links punctuation
    cross = [r for r in res.heads if r["kind"] == "cross"]
    assert len(cross) == 12 and res.run["batches"] == 4
    for r in cross:
        layer, head = r["layer"], r["head"]
        assert r["aer"] == pytest.approx(want["heads"][layer][head], abs=1e-12), (layer, head)
        assert r["aer_precision"] == pytest.approx(want["precision"]["heads"][layer][head], abs=1e-12)
        assert r["aer_recall"] == pytest.approx(want["recall"]["heads"][layer][head], abs=1e-12)
    assert all(math.isnan(r["aer"]) for r in res.heads if r["kind"] == "self")  # no gold for self-attention
    assert [e["aer"] for e in g["layers"]] == pytest.approx(want["layers"], abs=1e-12)
    assert g["mean_of_all_heads"]["aer"] == pytest.approx(want["average"], abs=1e-12)
    assert (g["best_head"]["layer"], g["best_head"]["head"]) == (want["best_head"]["layer"], want["best_head"]["head"])
    assert g["pairs"] == want["n_sentences"] == 16 and g["sure_links"] == want["n_gold_links"]
    # the counts are what the scores say, by the AER formula (Och & Ney), and differ across heads
    for key, (a_s, a_p, a, s) in g["counts"]["heads"].items():
        layer, head = map(int, key.split(":"))
        row = next(r for r in cross if (r["layer"], r["head"]) == (layer, head))
        assert row["aer"] == pytest.approx(1 - (a_s + a_p) / (a + s), abs=1e-12)
        assert a_p >= a_s and s == g["sure_links"]
    assert len({round(r["aer"], 9) for r in cross}) > 6
    # the demo's tokenizers split words into pieces, so merging subwords back to words is part of what agreed
    from attnviz.runtime.align import encode_words

    m = open_model(TRANSLATION, provider="cpu")
    for side, lines, tok in (("src", "set.src", m.tokenizers[0]), ("tgt", "set.tgt", m.tokenizers[1])):
        for line in (bible_gold / lines).read_text().splitlines():
            wids = encode_words(tok, line.split(), special=False).word_ids
            if len(wids) > len(set(wids)):
                break
        else:
            raise AssertionError(f"no {side} word of the set is split into pieces")


def test_possible_links_count_for_precision_only(bible_gold):
    """The fixture's gold has possible links: a head's precision counts them, its recall only sure ones (a check
    that the reference itself sees P ⊋ S, so the comparison above covers it)."""
    gold = align.read_pharaoh(bible_gold / "set.gold")
    assert sum(len(p) for _, p in gold) >= 8
    assert all(not (s & p) for s, p in gold)


def test_gold_run_interrupted_then_resumed_counts_every_pair_once(bible_gold, tmp_path):
    kw = dict(pair_column="en", gold_column="gold", batch_size=3)
    run_corpus(_cfg(TRANSLATION, bible_gold / "pairs.jsonl", tmp_path / "full", **kw))

    def stop(done):
        if done >= 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_corpus(_cfg(TRANSLATION, bible_gold / "pairs.jsonl", tmp_path / "cut", **kw), on_batch=stop)
    assert (tmp_path / "cut" / CHECKPOINT).exists()
    s = run_corpus(_cfg(TRANSLATION, bible_gold / "pairs.jsonl", tmp_path / "cut", **kw))
    assert s.resumed_items == 6 and s.items == 16
    full, cut = _gold(tmp_path / "full"), _gold(tmp_path / "cut")
    assert cut["counts"] == full["counts"] and cut["pairs"] == 16
    worst = [e for e in _table(tmp_path / "cut")[1] if e[2] == "aer"]
    assert worst and worst == [e for e in _table(tmp_path / "full")[1] if e[2] == "aer"]


def test_gold_from_parquet_equals_jsonl(bible_gold, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    recs = [json.loads(x) for x in (bible_gold / "pairs.jsonl").read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(recs), tmp_path / "pairs.parquet")
    kw = dict(pair_column="en", gold_column="gold", batch_size=8)
    run_corpus(_cfg(TRANSLATION, bible_gold / "pairs.jsonl", tmp_path / "j", **kw))
    run_corpus(_cfg(TRANSLATION, tmp_path / "pairs.parquet", tmp_path / "p", **kw))
    assert _gold(tmp_path / "j")["counts"] == _gold(tmp_path / "p")["counts"]


def _cli(tmp_path, capsys, *extra, texts=None, model=TRANSLATION):
    args = ["corpus", str(model), "--texts", str(texts), "--out", str(tmp_path / "o"), "--no-progress", *extra]
    code = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    return code, err


def _jsonl(tmp_path, recs) -> Path:
    f = tmp_path / "c.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return f


@pytest.mark.parametrize(
    "gold, flags, says",
    [
        ("0-0 1-x", (), ["item 2", "1-x"]),  # malformed Pharaoh
        ("0-0 7-1", (), ["item 2", "7"]),  # a source word the sentence does not have
        ("0-0 1-0", ("--convention", "input"), None),  # fine: the run succeeds
        (None, (), ["line 2", "'gold'", "--gold-column"]),  # the record has no gold string
    ],
)
def test_bad_gold_is_one_line(tmp_path, capsys, gold, flags, says):
    recs = [{"text": "a b", "en": "x y", "gold": "0-0 1-1"}, {"text": "a b c", "en": "x y"}]
    if gold is not None:
        recs[1]["gold"] = gold
    f = _jsonl(tmp_path, recs)
    code, err = _cli(tmp_path, capsys, "--text-pair-column", "en", "--gold-column", "gold", *flags, texts=f)
    if says is None:
        assert code == 0 and _gold(tmp_path / "o")["convention"] == "input"
        return
    assert code == 2 and len(err) == 1 and err[0].startswith("attnviz: error:"), err
    assert all(s in err[0] for s in says), err
    assert not (tmp_path / "o").exists()


def test_gold_flags_that_cannot_work_are_one_line(tmp_path, capsys):
    f = _jsonl(tmp_path, [{"text": "a b", "en": "x y", "gold": "0-0"}])
    cases = [
        (("--gold-column", "gold"), TRANSLATION, f, "--text-pair-column"),  # gold without targets
        (("--text-pair-column", "en", "--convention", "input"), TRANSLATION, f, "--gold-column"),
        (
            ("--text-pair-column", "en", "--gold-column", "gold"),
            TRANSLATION.parent / "sequence-classification.onnx",
            f,
            "cross-attention",
        ),
    ]
    for flags, model, texts, says in cases:
        code, err = _cli(tmp_path, capsys, *flags, texts=texts, model=model)
        assert code == 2 and len(err) == 1 and says in err[0], (flags, err)
    txt = tmp_path / "c.txt"
    txt.write_text("a b\n")
    code, err = _cli(tmp_path, capsys, "--gold-column", "gold", "--text-pair-column", "en", texts=txt)
    assert code == 2 and len(err) == 1 and ".txt files have no columns" in err[0]
    assert not (tmp_path / "o").exists()


def test_gold_cli_prints_the_best_head(bible_gold, tmp_path, capsys):
    code = main(
        [
            "corpus",
            str(TRANSLATION),
            "--texts",
            str(bible_gold / "pairs.jsonl"),
            "--text-pair-column",
            "en",
            "--gold-column",
            "gold",
            "--out",
            str(tmp_path / "o"),
            "--no-progress",
        ]
    )
    out = capsys.readouterr().out
    g = _gold(tmp_path / "o")
    b = g["best_head"]
    assert code == 0 and f"best cross head {b['layer']}:{b['head']} AER {b['aer']:.4f}" in out
    heads = read(tmp_path / "o").heads
    assert b["aer"] == min(r["aer"] for r in heads if r["kind"] == "cross")
    assert np.isfinite([r["aer_recall"] for r in heads if r["kind"] == "cross"]).all()


def test_optimum_marian_folder_gold_equals_attnviz_align(optimum_export, tmp_path):
    """An optimum folder (encoder_model.onnx + decoder_model.onnx) with its Hugging Face tokenizer.json and no
    attnviz metadata (so the predict convention): the same scores as align.  Subword merging is covered above
    (the translation demo splits words into pieces); this tokenizer is word-level."""
    folder = optimum_export("marian") / "onnx"
    model = open_model(folder, provider="cpu")
    rng = np.random.default_rng(5)
    words = [f"w{i}" for i in range(96)]
    src, tgt, gold = [], [], []
    for _ in range(10):
        s, t = list(rng.choice(words, rng.integers(2, 9))), list(rng.choice(words, rng.integers(1, 9)))
        links = {(int(rng.integers(len(s))), j) for j in range(len(t)) if rng.random() < 0.8}
        cells = [f"{i}{'?' if n % 4 == 3 else '-'}{j}" for n, (i, j) in enumerate(sorted(links))]
        src.append(" ".join(s))
        tgt.append(" ".join(t))
        gold.append(" ".join(cells))
    for ext, lines in ((".src", src), (".tgt", tgt), (".gold", gold)):
        (tmp_path / f"set{ext}").write_text("".join(x + "\n" for x in lines))
    texts = _jsonl(tmp_path, [{"text": s, "tgt": t, "g": g} for s, t, g in zip(src, tgt, gold)])
    run_corpus(_cfg(folder, texts, tmp_path / "out", pair_column="tgt", gold_column="g", batch_size=4))
    want = score_test_set(model, tmp_path / "set.gold", "predict")
    res = read(tmp_path / "out")
    cross = [r for r in res.heads if r["kind"] == "cross"]
    assert len(cross) == sum(len(row) for row in want["heads"]) and res.run["gold"]["convention"] == "predict"
    for r in cross:
        assert r["aer"] == pytest.approx(want["heads"][r["layer"]][r["head"]], abs=1e-12), (r["layer"], r["head"])
        assert r["aer_recall"] == pytest.approx(want["recall"]["heads"][r["layer"]][r["head"]], abs=1e-12)
    assert res.run["gold"]["mean_of_all_heads"]["aer"] == pytest.approx(want["average"], abs=1e-12)


def test_each_cross_head_lists_the_pairs_it_aligns_worst(bible_gold, tmp_path):
    """examples.parquet, score "aer": per cross head the k pairs with the highest AER of their own, ties to the
    lower item, against each pair scored alone (one unpadded run per pair, links by core.align)."""
    from attnviz.runtime.align import Aligner, is_punctuation

    run_corpus(_cfg(TRANSLATION, bible_gold / "pairs.jsonl", tmp_path / "o", pair_column="en", gold_column="gold", k=3))
    res = read(tmp_path / "o")
    aligner = Aligner(open_model(TRANSLATION, provider="cpu"))
    per_pair = {}  # (layer, head) -> [(item AER, item)]
    gold = align.read_pharaoh(bible_gold / "set.gold")
    srcs, tgts = (bible_gold / "set.src").read_text().splitlines(), (bible_gold / "set.tgt").read_text().splitlines()
    for k, (s, t, (sure, possible)) in enumerate(zip(srcs, tgts, gold)):
        sample = aligner.run(s.split(), t.split()).sample("input", sure, possible)
        sample.skip = [is_punctuation(w) for w in t.split()]  # the Bible gold never links punctuation
        for layer in range(sample.attn.shape[0]):
            for head in range(sample.attn.shape[1]):
                links = align.attention_to_links(
                    sample.attn[layer, head],
                    sample.query_words,
                    sample.key_words,
                    len(t.split()),
                    len(s.split()),
                    skip=sample.skip,
                )
                c = align.AERCounter.of(align.link_counts(links, sure, possible))
                per_pair.setdefault((layer, head), []).append((c.aer, k))
    for (layer, head), scored in per_pair.items():
        want = sorted(scored, key=lambda x: (-x[0], x[1]))[:3]
        got = sorted(
            (e for e in res.examples if e["score"] == "aer" and (e["layer"], e["head"]) == (layer, head)),
            key=lambda e: e["rank"],
        )
        assert [e["item"] for e in got] == [i for _, i in want], (layer, head)
        assert [e["value"] for e in got] == pytest.approx([v for v, _ in want], abs=1e-12)
        assert all(e["kind"] == "cross" and e["pair"] == tgts[e["item"]] for e in got)
    assert len({e["item"] for e in res.examples if e["score"] == "aer"}) > 3  # heads fail on different pairs
    assert not [e for e in res.examples if e["score"] == "aer" and e["kind"] == "self"]
