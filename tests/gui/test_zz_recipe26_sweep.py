from __future__ import annotations
import json
from pathlib import Path
import pytest
from gui_helpers import open_and_wait
from attnviz.cli import main
from attnviz.figures.recipe import recipe_path_for
MODELS = Path("/work/wt/recipe26/models")
SELS = [dict(), dict(mode="max"), dict(mode="rollout"), dict(mode="head", layer=0, head=3), dict(mode="mean", layer_lo=0, layer_hi=1),
        dict(step=1), dict(hide_special=True, keep=0.9), dict(scale="shared"), dict(rows="input")]
@pytest.mark.parametrize("name", ["translation", "captioning"])
def test_sweep(qtbot, real_window, tmp_path, name):
    w = real_window
    open_and_wait(qtbot, w, MODELS / f"{name}.onnx", timeout=60000)
    bad = []
    n = 0
    for view in ("overview", "head", "links", "alignment", "image"):
        w.select_view(view)
        for bi in range(len(w.session.blocks)):
            for k, s in enumerate(SELS):
                try:
                    w.session.select(block=bi, **s)
                except Exception as e:
                    continue
                if w.figure_selection(w.current_view()) is None:
                    continue
                out = tmp_path / f"{view}-{bi}-{k}.png"
                w.last_error = None
                w.export_view(out)
                try:
                    qtbot.waitUntil(lambda: w.statusBar().currentMessage().startswith("Exported") or w.last_error, timeout=20000)
                except Exception:
                    bad.append((view, bi, s, "TIMEOUT " + w.statusBar().currentMessage()[-60:])); continue
                if w.last_error:
                    bad.append((view, bi, s, "ERROR " + w.last_error[:150])); w.last_error = None
                    if w.error_box is not None: w.error_box.close()
                    continue
                n += 1
                if w.last_recipe is None:
                    bad.append((view, bi, s, w.statusBar().currentMessage()[-80:]))
                    continue
                again = tmp_path / ("again-" + out.name)
                if main(["figure", "--recipe", str(w.last_recipe), "--out", str(again)]) != 0 or again.read_bytes() != out.read_bytes():
                    bad.append((view, bi, s, "WRONG RECIPE"))
                w.session.select(mode="mean", layer=0, head=0, layer_lo=0, layer_hi=-1, step=-1, hide_special=False, keep=1.0, scale="fixed", rows="predict")
    w.workers.wait(20000)
    print(name, n, "exports", len(bad), "without recipe")
    for b in bad[:12]: print("  ", b)
