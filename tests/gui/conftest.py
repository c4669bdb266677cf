"""GUI test fixtures: an isolated window (fake or real runtime), tiny real ONNX models, sample files."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")
pytest.importorskip("pyqtgraph")
sys.path.insert(0, str(Path(__file__).parent))

from fakes import make_opener
from gui_helpers import FAKE_MODELS


@pytest.fixture
def files(tmp_path):
    """Placeholder model files for the fake opener, a real PNG, a corrupt image and a text file."""
    import numpy as np
    from PIL import Image

    out = {}
    for name in FAKE_MODELS:
        p = tmp_path / name
        p.write_bytes(b"fake")
        out[name] = p
    a = np.zeros((48, 48, 3), np.uint8)
    a[8:24, 24:44] = (220, 30, 30)
    Image.fromarray(a).save(tmp_path / "square.png")
    out["image"] = tmp_path / "square.png"
    (tmp_path / "corrupt.png").write_bytes(b"\x89PNG not really")
    out["corrupt"] = tmp_path / "corrupt.png"
    (tmp_path / "notes.txt").write_text("hello")
    out["txt"] = tmp_path / "notes.txt"
    (tmp_path / "garbage.onnx").write_bytes(b"nope")
    out["garbage"] = tmp_path / "garbage.onnx"
    return out


@pytest.fixture
def settings(tmp_path):
    from PySide6.QtCore import QSettings

    return QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat)


def _window(qtbot, opener, settings):
    from attnviz.gui.main_window import MainWindow

    w = MainWindow(opener=opener, settings=settings)
    qtbot.addWidget(w)
    w.resize(1300, 850)
    w.show()
    qtbot.waitExposed(w)
    yield w
    w.workers.cancel()
    assert w.workers.wait(10000), "a worker thread was left running"
    assert w.stats.workers.wait(10000)
    if w.error_box is not None:
        w.error_box.close()


@pytest.fixture
def window(qtbot, settings):
    """A main window whose runtime is the synthetic FakeModel."""
    yield from _window(qtbot, make_opener(FAKE_MODELS), settings)


@pytest.fixture
def real_window(qtbot, settings):
    """A main window on the real runtime."""
    pytest.importorskip("onnxruntime")
    yield from _window(qtbot, None, settings)


ONNX_BUILDERS = {
    "text": "build_bert",
    "mt": "build_bart",
    "vit": "build_vit",
    "mlp": "build_no_attention",
    "gpt": "build_gpt2",
    "captioner": "build_captioner",
    "image": "sample_image",
}


@pytest.fixture(scope="session")
def onnx_dir(tmp_path_factory):
    """Tiny real models, built once per machine (tests/build_cache.py: keyed on onnx_models' source, which imports
    no attnviz, and the versions its files depend on); a session reads its own copy."""
    import importlib.metadata
    import inspect
    import json
    import shutil

    import build_cache
    import onnx_models as om

    def build(into: Path) -> None:
        pytest.importorskip("torch")  # only to build them (~2 s of imports a session otherwise)
        pytest.importorskip("transformers")
        made = {name: getattr(om, fn)(into).name for name, fn in ONNX_BUILDERS.items()}
        (into / "made.json").write_text(json.dumps(made))

    # build_cache.sources() reads the helpers in tests/ only; this one is in tests/gui: its source goes in by hand
    versions = [f"{d}=={importlib.metadata.version(d)}" for d in ("numpy", "Pillow")]  # (torch & co.: build_cache)
    key = ["gui-onnx", json.dumps(ONNX_BUILDERS), inspect.getsource(om), *versions]
    cached = build_cache.cached_folder("gui-onnx", key, build)
    d = tmp_path_factory.mktemp("onnx")
    shutil.copytree(cached, d, dirs_exist_ok=True)
    made = json.loads((d / "made.json").read_text())
    return {name: d / made[name] for name in ONNX_BUILDERS}


@pytest.fixture(scope="session")
def quantized(tmp_path_factory):
    """The sequence-classification demo quantized to int8 (onnxruntime's dynamic quantization): the same heads with
    other weights, the compare tests' model B (made once a session; three test files each made their own)."""
    from gui_helpers import demo
    from onnxruntime.quantization import QuantType, quantize_dynamic

    q = tmp_path_factory.mktemp("q") / "sequence-classification-int8.onnx"
    quantize_dynamic(str(demo("sequence-classification")), str(q), weight_type=QuantType.QInt8)
    return q
