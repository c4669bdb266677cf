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


def test_each_heads_sink_share_is_its_rows_whole_mass_on_the_first_key(sink_text_model, tmp_path):
    """words24: heads.parquet's "sink_share" is, per head, the mean over every row of the corpus of the row's weight on
    key 0 ([CLS]) as the softmax left it (hand maps, the sink's share still in the row), not rescaled: below "first"
    (the same rows rescaled to 1) by about the rows' sum; the Corpus view's table shows it with its help."""
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(LINES) + "\n")
    out = tmp_path / "out"
    args = ["corpus", str(sink_text_model), "--texts", str(texts), "--out", str(out), "--no-progress"]
    assert main([*args, "--workers", "1", "--batch-size", "2"]) == 0
    maps = [_hand_maps(sink_text_model, line) for line in LINES]
    raw = np.concatenate([m[..., 0] for m in maps], -1).mean(-1)  # [H]: each row's whole mass on key 0
    rescaled = np.concatenate([m[..., 0] / m.sum(-1) for m in maps], -1).mean(-1)
    assert (rescaled - raw).min() > 1e-3  # the sink's share tells the two apart (far past the tolerance below)
    heads = sorted(pq.read_table(out / "heads.parquet").to_pylist(), key=lambda r: r["head"])
    np.testing.assert_allclose([r["sink_share"] for r in heads], raw, rtol=1e-5)
    np.testing.assert_allclose([r["first"] for r in heads], rescaled, rtol=1e-5)
    columns = pq.read_schema(out / "heads.parquet").names
    assert columns[columns.index("max") + 1] == "sink_share"  # after every column a run wrote before (additive)


def test_without_a_sink_the_sink_share_is_the_first_keys_mass(tmp_path):
    """Rows summing to 1: "sink_share" and "first" are the same number, the hand's mean of each row's key-0 weight."""
    model = tiny_text_model(tmp_path / "plain.onnx", layers=1, heads=2, d=8)
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(LINES) + "\n")
    out = tmp_path / "out"
    assert (
        main(["corpus", str(model), "--texts", str(texts), "--out", str(out), "--no-progress", "--workers", "1"]) == 0
    )
    for r in pq.read_table(out / "heads.parquet").to_pylist():
        assert r["sink_share"] == pytest.approx(r["first"], rel=1e-5)


def test_the_corpus_view_shows_each_heads_sink_share_with_its_help(qtbot, sink_text_model, tmp_path):
    """The window's Corpus view: a "sink_share" column beside "first", its tooltip saying what it is, each head's cell
    the hand's mean of its rows' key-0 weight before rescaling."""
    pytest.importorskip("pytestqt")
    from PySide6.QtCore import QSettings

    from attnviz.gui.main_window import MainWindow
    from attnviz.gui.views.corpus import open_corpus_results

    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(LINES) + "\n")
    out = tmp_path / "out"
    args = ["corpus", str(sink_text_model), "--texts", str(texts), "--out", str(out), "--no-progress"]
    assert main([*args, "--workers", "1"]) == 0
    w = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat))
    qtbot.addWidget(w)
    v = open_corpus_results(w, out)
    t = v.table
    names = [t.horizontalHeaderItem(i).text() for i in range(t.columnCount())]
    c = names.index("sink_share")
    assert names[c - 1] == "first"
    tip = t.horizontalHeaderItem(c).toolTip()
    assert "before the row is rescaled" in tip and "key position 0" in tip
    maps = [_hand_maps(sink_text_model, line) for line in LINES]
    raw = np.concatenate([m[..., 0] for m in maps], -1).mean(-1)
    head_c = names.index("head")
    shown = {int(t.item(r, head_c).value): float(t.item(r, c).value) for r in range(t.rowCount())}
    assert shown == {h: pytest.approx(float(raw[h]), rel=1e-5) for h in range(2)}
    v.close()


def test_results_written_before_the_sink_share_still_open(tmp_path):
    """A results folder from before the column (its heads.parquet without "sink_share") reads back with the column
    NaN, every other number as written: the schema grew, nothing was renamed or moved."""
    import math

    from attnviz.corpus import results_check

    model = tiny_text_model(tmp_path / "plain.onnx", layers=1, heads=2, d=8)
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(LINES) + "\n")
    out = tmp_path / "out"
    assert (
        main(["corpus", str(model), "--texts", str(texts), "--out", str(out), "--no-progress", "--workers", "1"]) == 0
    )
    table = pq.read_table(out / "heads.parquet")
    new = results_check.heads(out / "heads.parquet")
    pq.write_table(table.drop(["sink_share"]), out / "heads.parquet")
    old = results_check.heads(out / "heads.parquet")
    assert all(math.isnan(h["sink_share"]) for h in old)

    def rest(heads):  # every other column, NaN equal to NaN
        return [repr(sorted((k, v) for k, v in h.items() if k != "sink_share")) for h in heads]

    assert rest(old) == rest(new)


def _examples(out: Path) -> list[dict]:
    return pq.read_table(out / "examples.parquet").to_pylist()


def test_without_a_sink_no_sink_share_examples_repeat_the_firsts(tmp_path, qtbot):
    """polish24: where no site has a sink, sink_share is 'first' to the rounding, and its top examples were the same
    items again (~10 % of examples.parquet): the file holds none of them, every other statistic's as before; the
    Corpus view lists 'first''s for a head when sink_share is the score, and says why."""
    from PySide6.QtCore import QSettings, Qt

    from attnviz.core.stats import ROW_STATS
    from attnviz.gui.main_window import MainWindow
    from attnviz.gui.views.corpus import open_corpus_results

    model = tiny_text_model(tmp_path / "plain.onnx", layers=1, heads=2, d=8)
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(LINES) + "\n")
    out = tmp_path / "out"
    args = ["corpus", str(model), "--texts", str(texts), "--out", str(out), "--no-progress", "--workers", "1"]
    assert main([*args, "--top-k", "3"]) == 0
    ex = _examples(out)
    scores = {e["score"] for e in ex}
    assert "sink_share" not in scores
    assert scores == set(ROW_STATS) - {"sink_share"}
    for h in range(2):  # every other statistic keeps its 3 per head
        assert sum(e["head"] == h and e["score"] == "first" for e in ex) == 3
    w = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat))
    qtbot.addWidget(w)
    v = open_corpus_results(w, out)
    v.score.setCurrentText("sink_share")
    head = next(h for h in v.heads if h["head"] == 1)
    v.show_head(head)
    want = sorted((e for e in ex if e["head"] == 1 and e["score"] == "first"), key=lambda e: e["rank"])
    assert [(e["item"], e["row"], e["value"]) for e in v.shown_examples] == [
        (e["item"], e["row"], e["value"]) for e in want
    ]
    assert "top items by first" in v.examples_label.text() and "sink_share is first here" in v.examples_label.text()
    # polish24: what the user reads of "first" (the column's and the score list's tooltip) says it is rescaled at a
    # sink site and points at sink_share
    t = v.table
    c = next(c for c in range(t.columnCount()) if t.horizontalHeaderItem(c).text() == "first")
    first_tip = t.horizontalHeaderItem(c).toolTip()
    listed = v.score.itemData(v.score.findText("first"), Qt.ItemDataRole.ToolTipRole)
    for tip in (first_tip, listed):
        assert "rescaled to 1" in tip and "sink_share" in tip and "attention-sink site" in tip, tip
        assert tip.count("sink_share") >= 2  # the statistic's help and its direction's ("high = ...") both
    v.close()


def test_at_a_sink_site_the_sink_share_examples_are_the_rows_whole_key0_weights(sink_text_model, tmp_path):
    """Where the site has a sink, sink_share's top examples are written: each head's best is the item whose rows give
    key 0 the most weight on average as the softmax left them (the hand maps), not 'first''s rescaled rows."""
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(LINES) + "\n")
    out = tmp_path / "out"
    args = ["corpus", str(sink_text_model), "--texts", str(texts), "--out", str(out), "--no-progress"]
    assert main([*args, "--workers", "1"]) == 0
    ex = _examples(out)
    maps = [_hand_maps(sink_text_model, line) for line in LINES]
    for h in range(2):
        best = max((m[h, :, 0].mean(), i) for i, m in enumerate(maps))  # (the item's mean over its rows, item)
        top = next(e for e in ex if e["head"] == h and e["score"] == "sink_share" and e["rank"] == 0)
        assert (top["value"], top["item"]) == (pytest.approx(float(best[0]), rel=1e-5), best[1])
        first = next(e for e in ex if e["head"] == h and e["score"] == "first" and e["rank"] == 0)
        assert first["value"] > top["value"] + 1e-3  # rescaled: the sink's share put back into the row
