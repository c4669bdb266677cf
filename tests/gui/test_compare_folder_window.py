"""File ▸ Compare with model folder…: B as an export folder, as ``attnviz compare A FOLDER`` takes it.

The file dialog of File ▸ Compare with… cannot pick a folder, so a folder B (an optimum export, a Hub repository's
variants, a checkpoint saved as model.onnx + tokenizer.json) could not be compared in the window (cmpaudit26).
Reference: ``attnviz.corpus.compare.compare_results`` on B's own run of the same request, made here."""

from __future__ import annotations

from pathlib import Path

from gui_helpers import open_and_wait

MODELS = Path(__file__).resolve().parents[2] / "models"
DEMO = MODELS / "sequence-classification.onnx"
TEXT = "3 1 4 1 5 9 2 6"


def test_a_folder_is_compared_from_the_file_menu(qtbot, real_window, tmp_path, monkeypatch):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    import attnviz.gui.compare as gui_compare
    from attnviz.corpus.compare import compare_results
    from attnviz.runtime import open_model

    folder = tmp_path / "int8-checkpoint"
    folder.mkdir()
    quantize_dynamic(str(DEMO), str(folder / "model.onnx"), weight_type=QuantType.QInt8)
    w = real_window
    open_and_wait(qtbot, w, DEMO, text=TEXT)
    file_menu = next(a.menu() for a in w.menuBar().actions() if a.text() == "&File")
    words = {a.text().replace("&", ""): a for a in file_menu.actions()}
    action = next((a for t, a in words.items() if t.startswith("Compare with model folder")), None)
    assert action is not None, list(words)
    asked = []
    monkeypatch.setattr(
        gui_compare.QFileDialog, "getExistingDirectory", lambda *a, **k: asked.append(a[1]) or str(folder)
    )
    with qtbot.waitSignal(w.session.comparison_changed, timeout=60000):
        action.trigger()
    held = w.session.comparison
    assert asked == ["Compare with model folder"] and held is not None and Path(held.path_b) == folder
    rb = open_model(folder, provider="cpu").analyze_request(w.last_request)
    assert held.comparison.heads == compare_results(w.session.result, rb).heads
    assert any(r["js_divergence"] > 0 for r in held.comparison.heads)
