"""Small things a researcher notices in the first hour (issue 25, item 7), each against the real window."""

from __future__ import annotations

from pathlib import Path

import pytest
from gui_helpers import open_and_wait

pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[2]
CAPTIONING = ROOT / "models" / "captioning.onnx"


def test_overview_titles_count_one_layer_in_the_singular(qtbot, real_window):
    """The captioning demo's image encoder has one layer: "(1 layer × 4 heads)", not "1 layers"."""
    if not CAPTIONING.exists():
        pytest.skip("the captioning demo is not in this checkout")
    w = real_window
    w.select_view("overview")
    open_and_wait(qtbot, w, CAPTIONING, image=str(ROOT / "resources" / "samples" / "captioning.png"))
    titles = [t.textItem.toPlainText() for t in w.overview._labels if hasattr(t, "textItem")]
    blocks = {b.name: b for b in w.session.blocks}
    assert any(b.n_layers == 1 for b in blocks.values())  # the case at stake is there
    for name, b in blocks.items():
        layers = "1 layer" if b.n_layers == 1 else f"{b.n_layers} layers"
        heads = "1 head" if b.n_heads == 1 else f"{b.n_heads} heads"
        assert f"{name}  ({layers} × {heads})" in titles, titles
    assert not any("1 layers" in t or " 1 heads" in t for t in titles)


def test_screenshot_prints_only_its_result_line(tmp_path):
    """`--screenshot` offscreen: the plugin's "This plugin does not support propagateSizeHints()" is not printed."""
    import os
    import subprocess
    import sys

    if not CAPTIONING.exists():
        pytest.skip("the captioning demo is not in this checkout")
    shot = tmp_path / "s.png"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(ROOT))
    r = subprocess.run(
        [sys.executable, "-m", "attnviz.cli", str(CAPTIONING), "--screenshot", str(shot)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert r.returncode == 0 and r.stdout.strip() == f"saved {shot}", r.stdout + r.stderr
    assert "does not support" not in r.stderr and shot.is_file(), r.stderr


def _headers(stats) -> dict[str, str]:
    t = stats.table
    return {
        t.horizontalHeaderItem(i).text().replace("\n", " "): t.horizontalHeaderItem(i).toolTip()
        for i in range(2, t.columnCount())
    }


def test_head_stats_columns_say_what_they_mean_for_the_block(qtbot, real_window):
    """Captioning demo: its encoder's keys are image patches (raster order), its cross-attention rows are caption
    words over patches, where diagonal / previous token / distance mean nothing and are left out."""
    if not CAPTIONING.exists():
        pytest.skip("the captioning demo is not in this checkout")
    w = real_window
    open_and_wait(qtbot, w, CAPTIONING, image=str(ROOT / "resources" / "samples" / "captioning.png"))
    w.select_view("stats")
    blocks = w.session.blocks
    enc = next(i for i, b in enumerate(blocks) if b.kind == "self" and b.stack == "encoder")
    cross = next(i for i, b in enumerate(blocks) if b.kind == "cross")
    n_rows = {i: blocks[i].n_layers * blocks[i].n_heads for i in (enc, cross)}
    w.session.select(block=enc)
    qtbot.waitUntil(lambda: w.stats.table.rowCount() == n_rows[enc] and w.stats._pending is None, timeout=20000)
    heads = _headers(w.stats)
    assert {"diagonal", "prev. patch", "mean dist.", "entropy"} <= set(heads)  # a patch axis: "patch", not "token"
    assert "raster order" in heads["prev. patch"] and "patch itself" in heads["diagonal"]
    assert all(tip for tip in heads.values())
    w.session.select(block=cross)
    qtbot.waitUntil(lambda: w.stats._pending is None and w.stats.table.rowCount() == n_rows[cross], timeout=20000)
    heads = _headers(w.stats)
    assert "entropy" in heads and not {"diagonal", "prev. token", "prev. patch", "mean dist."} & set(heads), heads
    assert w.stats.columns == ["layer", "head", *[c for c in ("entropy", "first", "special", "max")]]


def test_readme_explains_every_head_stats_column():
    from attnviz.core.stats import STAT_COLUMNS

    text = (ROOT / "README.md").read_text()
    table = text.split("| column | text self-attention |", 1)[1].split("\n\n", 1)[0]
    rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("  | ")]
    assert rows == [label for label, _ in STAT_COLUMNS.values()]
