"""Helpers the GUI tests import by name (a module of its own: ``from conftest import`` picks whichever
conftest.py was imported first when several test folders run in one session)."""

from __future__ import annotations

from pathlib import Path

DEMOS = Path(__file__).resolve().parents[2] / "models"

FAKE_MODELS = {
    "text.onnx": dict(kind="encoder", layers=6, heads=12),
    "mt.onnx": dict(kind="encoder-decoder", layers=2, heads=4),
    "vit.onnx": dict(kind="vision", layers=2, heads=4),
    "cap.onnx": dict(kind="vision-decoder", layers=2, heads=4),
    "cnn.onnx": dict(kind="none"),
    "broken.onnx": dict(kind="broken"),
    "slow.onnx": dict(kind="encoder", delay=0.4),
    "long.onnx": dict(kind="encoder", layers=2, heads=3),
}


def open_and_wait(qtbot, w, path, timeout=30000, **values):
    """Open a model as a user would and wait until its first result is drawn."""
    with qtbot.waitSignal(w.result_shown, timeout=timeout):
        w.open_path(path, **values)


def run_and_wait(qtbot, w, timeout=30000, **values):
    with qtbot.waitSignal(w.result_shown, timeout=timeout):
        w.inputs.set_values(**values)
        w.inputs.run_button.click()


def shown_heatmap(qtbot, monkeypatch, screen: int):
    """A Head map widget shown at 700 x 700 on a screen of ``screen`` pixels a side (maps longer than that are
    "long": drawn pooled to the view, re-pooled on zoom)."""
    from attnviz.gui.views import heatmap

    monkeypatch.setattr(heatmap, "screen_cells", lambda: screen)
    w = heatmap.HeatmapWidget()
    qtbot.addWidget(w)
    w.resize(700, 700)
    w.show()
    qtbot.waitExposed(w)
    return w


def speech_demo() -> Path:
    """The bundled speech demo, a Whisper folder ``models/spoken-digits`` (skipped where the checkout has none)."""
    import pytest

    path = DEMOS / "spoken-digits"
    if not (path / "encoder_model.onnx").is_file():
        pytest.skip("models/spoken-digits is not in this checkout")
    return path


def shown_tab(w) -> str:
    """The title of the tab the window shows."""
    return w.tabs.tabText(w.tabs.currentIndex())


def kind_by_hand(model) -> str:
    """The kind of a demo model read from the opened model, not from its result (core.view.opening reads the
    result): a speech model takes sound (an input whose role is audio); the demos' others take words."""
    return "speech" if "audio" in set(model.roles.values()) else "text"


def demo(name: str) -> Path:
    """The bundled demo model ``models/NAME.onnx`` (the test skipped where the checkout has none)."""
    import pytest

    path = DEMOS / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"demo model {path.name} is not in this checkout")
    return path
