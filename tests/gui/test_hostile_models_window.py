"""Issue 24, the window's half: hostile model files opened for real (``open_path`` on the real runtime).

Each file is generated here from the tiny text model: NaN attention, bytes that are no ONNX, external data that
points outside the model's folder, a tokenizer.json that links out of it, and metadata no model needs (200,000 entries and one 60 MB value).  Each open
is at most one message, no exception reaches ``sys.excepthook`` and Qt prints no warning (strict.py), no file
changes, and the window opens a good model afterwards.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

import onnx
from onnx import TensorProto, numpy_helper
from onnx_builders import tiny_text_model
from PySide6.QtWidgets import QApplication
from strict import strict

from attnviz.gui.widgets.model_sidebar import MAX_ROWS, TIP_CHARS


def _nan_attention(t: Path) -> Path:
    """The attention scale is NaN: every score, so every softmax row, is NaN."""
    m = onnx.load(str(tiny_text_model(t / "src.onnx")))
    scale = next(x for x in m.graph.initializer if x.name == "scale")
    scale.CopyFrom(numpy_helper.from_array(np.array(np.nan, np.float32), "scale"))
    p = t / "nan.onnx"
    onnx.save(m, str(p))
    return p


def _not_onnx(t: Path) -> Path:
    p = t / "photo.onnx"
    p.write_bytes(b"\x08\x07" + bytes(range(256)) * 40)
    return p


def _external_outside(t: Path) -> Path:
    """The embedding's external data is ../secret.bin: a file beside the folder, never to be read."""
    folder = t / "model"
    folder.mkdir()
    m = onnx.load(str(tiny_text_model(t / "src.onnx")))
    w = next(x for x in m.graph.initializer if x.name == "emb")
    (t / "secret.bin").write_bytes(numpy_helper.to_array(w).tobytes())
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("raw_data")
    w.external_data.add(key="location", value="../secret.bin")
    p = folder / "escape.onnx"
    onnx.save(m, str(p))
    return p


def _tokenizer_link_out(t: Path) -> Path:
    """tokenizer.json beside the model is a link to a file outside its folder (attnviz.core.links)."""
    folder = t / "linked"
    folder.mkdir()
    (t / "secret.json").write_text("{}")
    (folder / "tokenizer.json").symlink_to("../secret.json")
    return tiny_text_model(folder / "model.onnx", metadata=False, causal=True, classifier=False)


CASES = {
    "nan attention": (_nan_attention, "nan"),
    "not onnx": (_not_onnx, "onnx"),
    "external data outside the folder": (_external_outside, "leaves the model's folder"),
    "tokenizer.json linking out of the folder": (_tokenizer_link_out, "copy the file itself into the folder"),
}


def _sha(folder: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_model_is_one_message(real_window, qtbot, tmp_path, name):
    win = real_window
    build, words = CASES[name]
    files = tmp_path / "files"  # the window's settings file lives in tmp_path
    files.mkdir()
    bad = build(files)
    before = _sha(files)
    messages: list[str] = []
    win.error_shown.connect(messages.append)
    with strict():
        with qtbot.waitSignal(win.error_shown, timeout=60000):
            win.open_path(bad, text="the cat sat")
        qtbot.waitUntil(lambda: not win.workers.live(), timeout=60000)
    assert len(messages) == 1, messages
    assert "\n" not in messages[0] and "Traceback" not in messages[0]
    assert words in messages[0].lower(), messages[0]
    assert _sha(files) == before
    with qtbot.waitSignal(win.result_shown, timeout=60000):  # the window still works
        win.open_path(tiny_text_model(tmp_path / "good.onnx"), text="the cat sat")


def test_huge_metadata_is_bounded_in_the_sidebar(real_window, qtbot, tmp_path):
    """200,000 metadata entries and a 60 MB value (issue 24 item 4): the model opens and runs, and the sidebar
    lists MAX_ROWS entries, then one row counting the rest, with every tooltip cut (it used to build 400,000
    items and hand Qt a 60 MB tooltip on the GUI thread)."""
    m = onnx.load(str(tiny_text_model(tmp_path / "src.onnx")))
    for i in range(200_000):
        e = m.metadata_props.add()
        e.key, e.value = f"key{i:06d}", f"value {i}"
    big = m.metadata_props.add()
    big.key, big.value = "big", "x" * (60 * 2**20)
    p = tmp_path / "meta.onnx"
    onnx.save(m, str(p))
    with strict():
        with qtbot.waitSignal(real_window.result_shown, timeout=120000):
            real_window.open_path(p, text="the cat sat")
    section = real_window.sidebar.section("Metadata")
    assert section.childCount() == MAX_ROWS + 1
    rows = [section.child(i) for i in range(section.childCount())]
    shown = {r.text(0): r for r in rows}
    assert len(shown["big"].toolTip(1)) < TIP_CHARS + 40 and len(shown["big"].text(1)) <= 120
    keys = [r.text(0) for r in rows[:-1]]
    assert keys == sorted(keys) and "key000000" in shown  # the first entries in key order
    n_meta = 200_000 + 1 + sum(1 for _ in onnx.load(str(tmp_path / "src.onnx")).metadata_props)
    assert rows[-1].text(1).startswith(f"{n_meta - MAX_ROWS:,} more")


def test_a_maps_file_with_no_maps_keeps_what_is_shown(real_window, qtbot, tmp_path):
    """Issue 24 item 8: a maps file with no sites used to become the shown result (no blocks, every view empty,
    the message saying a model ran); it is refused on load and the result shown before stays, views working."""
    win = real_window
    with qtbot.waitSignal(win.result_shown, timeout=60000):
        win.open_path(tiny_text_model(tmp_path / "good.onnx"), text="the cat sat")
    shown = win.session.result
    empty = tmp_path / "empty.npz"
    np.savez(empty, sites=np.array("[]"))
    with strict():
        with qtbot.waitSignal(win.error_shown, timeout=10000) as sig:
            win.open_path(empty)
        assert "no attention maps" in sig.args[0] and "model ran" not in sig.args[0]
        assert win.session.result is shown and win.session.blocks
        for i in range(win.tabs.count()):  # every view still draws the shown result
            win.tabs.setCurrentIndex(i)
            QApplication.processEvents()
