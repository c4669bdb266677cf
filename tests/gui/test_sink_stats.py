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


def test_a_softmax_over_the_keys_shows_no_row_sum_column(qtbot, real_window):
    w = real_window
    open_and_wait(qtbot, w, DEMO, text="3 1 4 1 5 9 2 6")
    cols = _table(qtbot, w, len(w.session.block.sites) * w.session.block.heads_in(0))
    assert "row sum" not in cols and "entropy" in cols
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
