"""Attention sinks (GPT-OSS: a learned logit per head joins every row of scores, its column sliced off before P·V)
in a corpus run.  The rows of such a map sum to less than 1; every row statistic is of the row rescaled to 1 over
the keys (where the head looks when it looks at a token), as the window's Head stats are, and the run says so in
one note (run.json's ``sink_sites`` / ``sink_note``, and once at the end).

The maps are computed here by hand in numpy from the model's own weights (embedding, Q/K projections, the sink
logits: the computation transformers' eager GPT-OSS attention does, ``softmax(concat(QKᵀ/√d, sink))[..., :T]``),
and the corpus's entropy is checked against the rescaled rows' entropy, not the keys-plus-sink one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnx_builders import VOCAB, tiny_text_model

from attnviz.cli import main
from attnviz.core.stats import head_stats

pq = pytest.importorskip("pyarrow.parquet")
SINKS = np.array([3.0, 0.5], np.float32)  # head 0 gives its sink most rows' larger share; head 1 a little
LINES = ["the cat sat on the mat", "a dog ran home", "the dog sat", "cat", "a cat ran on the mat home"]


@pytest.fixture(scope="module")
def sink_text_model(tmp_path_factory) -> Path:
    return tiny_text_model(tmp_path_factory.mktemp("sinks") / "sinks.onnx", layers=1, heads=2, d=8, sinks=SINKS)


def _hand_maps(path: Path, line: str) -> np.ndarray:
    """[H, T, T]: one line's map, by hand from the weights ([CLS] words [SEP], as the metadata's vocabulary reads)."""
    w = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    ids = [1, *(VOCAB.index(t) for t in line.split()), 2]
    x = w["emb"][ids]
    h, dh = len(SINKS), x.shape[1] // len(SINKS)
    q, k = ((x @ w[f"W{n}0"]).reshape(len(ids), h, dh).transpose(1, 0, 2) for n in "qk")
    s = q @ k.transpose(0, 2, 1) / np.sqrt(dh)
    s = np.concatenate([s, np.broadcast_to(SINKS[:, None, None], (h, len(ids), 1))], -1)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True))[..., :-1]


def _entropy(rows: np.ndarray) -> np.ndarray:
    return -(rows * np.log2(rows)).sum(-1)


def test_a_corpus_over_sink_heads_rescales_each_row_and_says_so(sink_text_model, tmp_path, capsys):
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(LINES) + "\n")
    out = tmp_path / "out"
    args = ["corpus", str(sink_text_model), "--texts", str(texts), "--out", str(out), "--no-progress"]
    assert main([*args, "--workers", "1", "--batch-size", "2"]) == 0
    maps = [_hand_maps(sink_text_model, line) for line in LINES]
    sums = np.concatenate([m.sum(-1) for m in maps], -1)  # [H, all rows]
    assert sums.max() < 1 and sums[0].mean() < 0.8  # the sink takes a share of every row
    rescaled = np.concatenate([_entropy(m / m.sum(-1, keepdims=True)) for m in maps], -1).mean(-1)
    with_sink = np.concatenate([_entropy(m) + _entropy(1 - m.sum(-1, keepdims=True)) for m in maps], -1).mean(-1)
    assert np.abs(rescaled - with_sink).min() > 0.05  # the two readings differ: the check below tells them apart
    heads = sorted(pq.read_table(out / "heads.parquet").to_pylist(), key=lambda r: r["head"])
    np.testing.assert_allclose([r["entropy"] for r in heads], rescaled, atol=1e-4)
    # the window's Head stats rescale alike: one item's entropy there is the hand's over its rows
    for hh in range(2):
        assert head_stats(maps[0][hh])["entropy"] == pytest.approx(_entropy(maps[0][hh] / sums[hh, :8, None]).mean())
    run = json.loads((out / "run.json").read_text())
    assert run["sink_sites"] == ["encoder self L0"]
    assert "rescaled to sum to 1 over the keys" in run["sink_note"] and "row sum" in run["sink_note"]
    said = [x for x in capsys.readouterr().err.splitlines() if "sink" in x]
    assert said == [f"attnviz: note: {run['sink_note']}"]


def test_a_model_without_sinks_says_nothing_of_them(tmp_path, capsys):
    model = tiny_text_model(tmp_path / "plain.onnx", layers=1, heads=2, d=8)
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(LINES) + "\n")
    out = tmp_path / "out"
    assert (
        main(["corpus", str(model), "--texts", str(texts), "--out", str(out), "--no-progress", "--workers", "1"]) == 0
    )
    run = json.loads((out / "run.json").read_text())
    assert "sink_sites" not in run and "sink_note" not in run
    assert "sink" not in capsys.readouterr().err
