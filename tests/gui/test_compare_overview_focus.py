"""The Overview's focus frame while a comparison is held is not red.

With File ▸ Compare with…, each head is framed "darker red the more it diverges from model B"; the focus frame
(what the other views draw) was red too, so on all-MiniLM-L6-v2 against its int8 copy the focused layer 5 read as
the most divergent (cmpaudit26).  Reference: the divergence frames' own colours, as the Overview drew them."""

from __future__ import annotations

from pathlib import Path

from gui_helpers import open_and_wait
from PySide6.QtGui import QColor

MODELS = Path(__file__).resolve().parents[2] / "models"
DEMO = MODELS / "sequence-classification.onnx"
TEXT = "3 1 4 1 5 9 2 6"


def _reddish(c: QColor) -> bool:
    h = c.hslHueF()  # -1 for a grey
    return c.saturationF() > 0.2 and (h < 0.1 or h > 0.9)


def test_the_focus_frame_leaves_red_to_the_divergence_frames(qtbot, real_window, tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    q = tmp_path / "int8.onnx"
    quantize_dynamic(str(DEMO), str(q), weight_type=QuantType.QInt8)
    w = real_window
    open_and_wait(qtbot, w, DEMO, text=TEXT)
    ov = w.overview
    w.select_view("overview")
    assert _reddish(ov.focus_box.pen().color())  # no comparison: the focus is red, as ever
    with qtbot.waitSignal(w.session.comparison_changed, timeout=60000):
        w.compare.compare_with(q)
    qtbot.waitUntil(lambda: bool(ov.frame_colours), timeout=10000)
    frames = [QColor(c) for c in ov.frame_colours.values()]
    assert any(_reddish(c) for c in frames)  # the divergence frames are the red ones
    focus = ov.focus_box.pen().color()
    assert not _reddish(focus) and focus.name() not in {c.name() for c in frames}
    with qtbot.waitSignal(w.session.comparison_changed, timeout=10000):
        w.compare.stop()
    qtbot.waitUntil(lambda: _reddish(ov.focus_box.pen().color()), timeout=10000)
