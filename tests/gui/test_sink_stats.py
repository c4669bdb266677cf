"""Head stats of attention with sinks (GPT-OSS): rows sum to less than 1 and the statistics rescale each row to 1,
so a head that gives its sink most of its mass looked like any other head.  The table then says how much each
head's rows kept ("row sum"), against the builder's numpy probabilities."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gui_helpers import open_and_wait
from onnx_builders import sink_model

pytest.importorskip("onnxruntime")

DEMO = Path(__file__).resolve().parents[2] / "models" / "sequence-classification.onnx"


def _table(qtbot, w, n: int) -> dict[str, list[float]]:
    w.select_view("stats")
    qtbot.waitUntil(lambda: w.stats._pending is None and w.stats.table.rowCount() == n, timeout=20000)
    t = w.stats.table
    heads = [t.horizontalHeaderItem(i).text().replace("\n", " ") for i in range(t.columnCount())]
    by_head = sorted(range(n), key=lambda r: t.item(r, 1).value)
    return {h: [t.item(r, c).value for r in by_head] for c, h in enumerate(heads)}


def test_head_stats_say_how_much_of_each_row_the_sink_took(qtbot, real_window, tmp_path):
    from attnviz.cli import main

    path, feeds, want = sink_model(tmp_path / "sinks.onnx", seq=8, heads=4, d=8)
    np.savez(tmp_path / "feeds.npz", **feeds)
    out = tmp_path / "sinks.npz"
    assert main(["extract", str(path), "--inputs", str(tmp_path / "feeds.npz"), "--out", str(out)]) == 0
    w = real_window
    open_and_wait(qtbot, w, out)
    cols = _table(qtbot, w, 4)
    np.testing.assert_allclose(cols["row sum"], want[0].sum(-1).mean(-1), atol=1e-5)  # each head's mean row sum
    assert "Rows sum to less than 1 in 4 heads" in w.stats.info.text()
    # the other columns stay of each row rescaled to 1: entropy in bits of want's rows over their sums
    p = want[0] / want[0].sum(-1, keepdims=True)
    np.testing.assert_allclose(cols["entropy"], (-(p * np.log2(p)).sum(-1)).mean(-1), atol=1e-5)


def test_head_stats_give_each_heads_sink_share_as_the_corpus_does(qtbot, real_window, tmp_path):
    """polish24: the table's "sink share" is, per head, the mean of each row's weight on key 0 as the softmax left it
    (the builder's numpy probabilities, the sink's share still out of the row), the corpus's sink_share; "first
    token" beside it is the same rows rescaled to 1, told apart from it by the sink."""
    from attnviz.cli import main

    path, feeds, want = sink_model(tmp_path / "sinks.onnx", seq=8, heads=4, d=8)
    np.savez(tmp_path / "feeds.npz", **feeds)
    out = tmp_path / "sinks.npz"
    assert main(["extract", str(path), "--inputs", str(tmp_path / "feeds.npz"), "--out", str(out)]) == 0
    w = real_window
    open_and_wait(qtbot, w, out)
    cols = _table(qtbot, w, 4)
    raw = want[0][..., 0].mean(-1)  # [H]: each row's whole weight on key 0
    rescaled = (want[0][..., 0] / want[0].sum(-1)).mean(-1)
    assert np.abs(rescaled - raw).min() > 1e-3  # far past the tolerance below: the two readings differ
    np.testing.assert_allclose(cols["sink share"], raw, atol=1e-5)
    np.testing.assert_allclose(cols["first token"], rescaled, atol=1e-5)
    names = list(cols)
    assert names[names.index("first token") + 1] == "sink share"  # beside its rescaled twin
    t = w.stats.table
    tip = t.horizontalHeaderItem(names.index("sink share")).toolTip()
    assert "before the statistics rescale" in tip and "sink_share" in tip
    assert "'sink share' the first key's share of the whole row" in w.stats.info.text()
    # and "first token" says it is of the rescaled rows, and where the whole row's share is
    first_tip = t.horizontalHeaderItem(names.index("first token")).toolTip()
    assert "rescaled to 1" in first_tip and "sink_share" in first_tip and "'sink share'" in first_tip


def test_a_softmax_over_the_keys_shows_no_row_sum_column(qtbot, real_window):
    w = real_window
    open_and_wait(qtbot, w, DEMO, text="3 1 4 1 5 9 2 6")
    cols = _table(qtbot, w, len(w.session.block.sites) * w.session.block.heads_in(0))
    assert "row sum" not in cols and "entropy" in cols
    assert "sink share" not in cols  # rows summing to 1: it is "first token" to the last digit
    assert "Rows sum" not in w.stats.info.text()


def test_a_one_site_result_is_one_site_in_the_run_sidebar(qtbot, real_window, tmp_path):
    """The sink graph has one attention: the Run sidebar said "1 sites"."""
    from attnviz.cli import main

    path, feeds, _ = sink_model(tmp_path / "sinks.onnx")
    np.savez(tmp_path / "feeds.npz", **feeds)
    out = tmp_path / "sinks.npz"
    assert main(["extract", str(path), "--inputs", str(tmp_path / "feeds.npz"), "--out", str(out)]) == 0
    open_and_wait(qtbot, real_window, out)
    assert real_window.sidebar.values("Run")["maps"].startswith("1 site, encoder self-attention 1×2")
