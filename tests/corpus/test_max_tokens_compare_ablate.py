"""``attnviz compare --texts`` and ``attnviz ablate --texts`` with ``--max-tokens N`` (session 17): both models (the
base and ablated runs) read the same cut items.  Checked against a hand computation: the corpus cut by hand to the
words that fit (one token a word) gives the very same tables without the flag."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
from onnx_builders import tiny_text_model
from test_max_tokens_pairs import TRANSLATION, _one_token_words

from attnviz.cli import main

WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "home"]  # onnx_builders.VOCAB's words
N = 6  # [CLS] + 4 words + [SEP]


def _texts(tmp_path, n=14, labels=None):
    """A long corpus and the same cut by hand (.jsonl, optional label column ``y``); the lines of both."""
    rng = np.random.default_rng(7)
    lines = [" ".join(rng.choice(WORDS, int(rng.integers(2, 10)))) for _ in range(n)]
    cut = [" ".join(x.split()[: N - 2]) for x in lines]
    for name, rows in (("long", lines), ("cut", cut)):
        recs = [{"text": x, **({"y": labels[k % len(labels)]} if labels else {})} for k, x in enumerate(rows)]
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert 0 < sum(a != b for a, b in zip(lines, cut)) < n
    return lines, cut


def _rows(folder, name="heads.parquet"):
    return pq.read_table(folder / name).to_pylist()


def _same_rows(a: list[dict], b: list[dict], skip=()) -> None:
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        for k, v in x.items():
            if k in skip:
                continue
            same = (isinstance(v, float) and np.isnan(v) and np.isnan(y[k])) or v == y[k]
            assert same, (k, v, y[k])


def _compare(a, b, texts, out, *extra):
    argv = ["compare", a, b, "--texts", texts, "--out", out, "--workers", "1", "--batch-size", "4"]
    return main([str(x) for x in (*argv, "--provider", "cpu", "--no-progress", *extra)])


def test_compare_reads_the_cut_items_in_both_models(tmp_path, capsys):
    a = tiny_text_model(tmp_path / "a.onnx", seed=1)
    b = tiny_text_model(tmp_path / "b.onnx", seed=2)
    lines, cut = _texts(tmp_path)
    assert _compare(a, b, tmp_path / "long.jsonl", tmp_path / "x", "--max-tokens", N) == 0
    assert _compare(a, b, tmp_path / "cut.jsonl", tmp_path / "y") == 0
    _same_rows(_rows(tmp_path / "x"), _rows(tmp_path / "y"))
    items = _rows(tmp_path / "x", "items.parquet")
    _same_rows(items, _rows(tmp_path / "y", "items.parquet"))  # per item: the cut text, its tokens, its measures
    assert [r["text"] for r in items] == cut and [r["tokens"] for r in items] == [len(x.split()) + 2 for x in cut]
    run = json.loads((tmp_path / "x" / "run.json").read_text())
    assert run["max_tokens"] == N and run["input"]["max_tokens"] == N
    assert run["items_truncated"] == sum(len(x.split()) > N - 2 for x in lines) and "first N" in run["truncation"]
    assert "max_tokens" not in json.loads((tmp_path / "y" / "run.json").read_text())


def test_compare_cuts_sources_and_targets_of_encoder_decoders(tmp_path, capsys):
    """translation.onnx against a copy of itself: the items' tokens, texts and targets are the hand-cut ones
    (a source keeps its first N words, the decoder its start token and the target's first N - 1)."""
    from attnviz.runtime import open_model

    copy = tmp_path / "copy.onnx"
    copy.write_bytes(TRANSLATION.read_bytes())
    src_tok, tgt_tok = open_model(TRANSLATION, provider="cpu").tokenizers
    sw, tw = _one_token_words(src_tok, 20, 3), _one_token_words(tgt_tok, 20, 4)
    rng = np.random.default_rng(5)
    pairs = [
        (" ".join(rng.choice(sw, int(rng.integers(2, 9)))), " ".join(rng.choice(tw, int(rng.integers(2, 9)))))
        for _ in range(10)
    ]
    cut = [(" ".join(s.split()[:N]), " ".join(t.split()[: N - 1])) for s, t in pairs]
    for name, rows in (("long", pairs), ("cut", cut)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps({"text": s, "en": t}) + "\n" for s, t in rows))
    extra = ("--text-pair-column", "en")
    assert _compare(TRANSLATION, copy, tmp_path / "long.jsonl", tmp_path / "x", *extra, "--max-tokens", N) == 0
    assert _compare(TRANSLATION, copy, tmp_path / "cut.jsonl", tmp_path / "y", *extra) == 0
    items = _rows(tmp_path / "x", "items.parquet")
    _same_rows(items, _rows(tmp_path / "y", "items.parquet"))
    assert [(r["text"], r["pair"]) for r in items] == cut
    run = json.loads((tmp_path / "x" / "run.json").read_text())
    want = sum(len(s.split()) > N or len(t.split()) + 1 > N for s, t in pairs)
    assert 0 < want < len(pairs) and run["items_truncated"] == want and "target" in run["truncation"]
    sides = (sum(len(s.split()) > N for s, _ in pairs), sum(len(t.split()) + 1 > N for _, t in pairs))
    assert (run["sources_truncated"], run["targets_truncated"]) == sides


def test_ablate_base_and_ablated_runs_read_the_cut_items(tmp_path, capsys):
    model = tiny_text_model(tmp_path / "cls.onnx", layers=2, heads=2, d=8, seed=1)
    lines, _ = _texts(tmp_path, labels=["A", "B", 0])
    common = ["ablate", str(model), "--all-heads", "--label-column", "y", "--provider", "cpu", "--workers", "1"]
    common += ["--batch-size", "4", "--no-progress"]
    assert (
        main([*common, "--texts", str(tmp_path / "long.jsonl"), "--out", str(tmp_path / "x"), "--max-tokens", "6"]) == 0
    )
    assert main([*common, "--texts", str(tmp_path / "cut.jsonl"), "--out", str(tmp_path / "y")]) == 0
    _same_rows(_rows(tmp_path / "x"), _rows(tmp_path / "y"))
    run, hand = (json.loads((tmp_path / d / "run.json").read_text()) for d in ("x", "y"))
    assert run["base_loss"] == hand["base_loss"] and run["base_accuracy"] == hand["base_accuracy"]
    assert run["max_tokens"] == N and run["items_truncated"] == sum(len(x.split()) > N - 2 for x in lines)
    assert "max_tokens" not in hand
