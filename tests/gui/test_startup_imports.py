"""The window's start-up path (command line -> window -> a model opened and run -> every view drawn) imports
neither pyarrow nor pandas (~0.5 s together); only File > Open corpus results needs them.  A fresh interpreter,
so what other tests imported does not count."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pyarrow", "pandas", "ray")

SCRIPT = r"""
import sys, time
from attnviz.cli import build_parser
build_parser()  # every subcommand's arguments, as `attnviz` builds them before it opens the window
from attnviz.gui.app import make_app
from attnviz.gui.main_window import MainWindow
app = make_app()
w = MainWindow()
w.show()
shown = []
w.result_shown.connect(lambda *a: shown.append(1))
w.open_path(sys.argv[1], image=sys.argv[2])
t0 = time.monotonic()
while not shown and not w.last_error and time.monotonic() - t0 < 60:
    app.processEvents()
    time.sleep(0.01)
assert shown, w.last_error
for view in ("overview", "heatmap", "links", "alignment", "image", "stats"):
    w.select_view(view)
    app.processEvents()
w.workers.wait(30000)
print(" ".join(m for m in sys.argv[3:] if m in sys.modules) or "none")
"""


def test_window_start_up_and_a_run_import_no_pyarrow_or_pandas(tmp_path):
    pytest.importorskip("onnxruntime")
    model = ROOT / "models" / "captioning.onnx"
    if not model.exists():
        pytest.skip("the captioning demo is not in this checkout")
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", ATTNVIZ_SETTINGS=str(tmp_path / "s.ini"), PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(model), str(ROOT / "resources" / "samples" / "captioning.png"), *HEAVY],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "none"
