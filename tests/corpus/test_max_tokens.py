"""``attnviz corpus --max-tokens N`` (audit16): each text item's first N tokens, a final [SEP] kept last, as
``attnviz open --max-tokens`` cuts one text.  Checked against a hand computation: the same corpus with every line
cut by hand to the words that fit must give the very same statistics, and its lines are the examples' texts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnviz.cli import main
from attnviz.corpus.output import read

N = 6  # [CLS] + 4 words + [SEP]: the planted model's tokenizer is one token a word


def _corpus(model, texts, out, *extra):
    argv = ["corpus", model, "--texts", texts, "--out", out, "--workers", "1", "--batch-size", "4"]
    return main([str(a) for a in (*argv, "--provider", "cpu", "--no-progress", *extra)])


def test_max_tokens_gives_the_statistics_of_the_hand_cut_corpus(planted, tmp_path, capsys):
    model, texts = planted
    lines = [x for x in texts.read_text().splitlines() if x.strip()][:40]
    long = tmp_path / "long.txt"
    long.write_text("\n".join(lines) + "\n")
    cut = [" ".join(x.split()[: N - 2]) for x in lines]  # by hand: the words whose tokens fit between [CLS] and [SEP]
    (tmp_path / "cut.txt").write_text("\n".join(cut) + "\n")
    assert _corpus(model, long, tmp_path / "a", "--max-tokens", N) == 0
    assert _corpus(model, tmp_path / "cut.txt", tmp_path / "b") == 0
    a, b = read(tmp_path / "a"), read(tmp_path / "b")
    assert len(a.heads) == len(b.heads) > 0
    for x, y in zip(a.heads, b.heads):
        assert x.keys() == y.keys()
        for k, v in x.items():
            same = (isinstance(v, float) and np.isnan(v) and np.isnan(y[k])) or v == y[k]
            assert same, (k, v, y[k])
    assert a.examples and [e["text"] for e in a.examples] == [e["text"] for e in b.examples]
    assert all(e["text"] == cut[e["item"]] for e in a.examples)  # the examples show what the model read
    run = json.loads((tmp_path / "a" / "run.json").read_text())
    want = sum(len(x.split()) > N - 2 for x in lines)
    assert 0 < want < len(lines) and run["max_tokens"] == N and run["items_truncated"] == want
    assert run["tokens"] == sum(len(x.split()) + 2 for x in cut)
    assert "max_tokens" not in json.loads((tmp_path / "b" / "run.json").read_text())


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--max-tokens", "0"], "--max-tokens must be 1 or more"),
        (["--max-tokens", "4", "--text-pair-column", "b", "--gold-column", "g"], "would cut words that --gold-column"),
    ],
)
def test_max_tokens_refusals_are_one_line(planted, tmp_path, capsys, extra, words):
    model, texts = planted
    assert _corpus(model, texts, tmp_path / "out", *extra) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1 and not (tmp_path / "out").exists()


def test_an_item_past_the_positions_names_its_line_and_the_flag(tmp_path, capsys):
    """models/sequence-classification.onnx declares 16 positions; line 3 (after a blank line) holds 30 tokens."""
    from pathlib import Path

    model = Path(__file__).resolve().parents[2] / "models" / "sequence-classification.onnx"
    texts = tmp_path / "c.txt"
    texts.write_text("1 2 3\n\n" + " ".join(["7"] * 30) + "\n")
    assert _corpus(model, texts, tmp_path / "out") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "corpus item 1 (line 3)" in err and "30 tokens" in err
    assert "use --max-tokens 16 to truncate" in err and not (tmp_path / "out").exists()
    assert _corpus(model, texts, tmp_path / "out", "--max-tokens", "16") == 0
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["items_truncated"] == 1 and run["tokens"] == 3 + 16
