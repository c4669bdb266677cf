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
