"""The compared Overview's frames have a key (cmp27): what their colours say and on which scale, under the
window's Overview and under the exported figure's grid, from the one view model (``FramesKey``).

References: the comparison's own rows (``compare_results``' JS divergence per head: the key's top is the largest);
the frames' colours as the Overview drew them (the key's ends are the lightest and darkest of the scale they are
taken from, and the most divergent head's frame is the key's right end); the pixels of the window's key strip."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gui_helpers import open_and_wait
from PySide6.QtGui import QColor

MODELS = Path(__file__).resolve().parents[2] / "models"
DEMO = MODELS / "sequence-classification.onnx"
TEXT = "3 1 4 1 5 9 2 6"


def _compared(qtbot, w, path):
    open_and_wait(qtbot, w, DEMO, text=TEXT)
    w.select_view("overview")
    with qtbot.waitSignal(w.session.comparison_changed, timeout=60000):
        w.compare.compare_with(path)
    ov = w.overview
    qtbot.waitUntil(lambda: bool(ov.frame_colours), timeout=10000)
    return w.session.comparison, ov


def test_the_window_overview_keys_its_frames(qtbot, real_window, quantized):
    from attnviz.core.view import DIVERGENCE_COLOURS

    w = real_window
    held, ov = _compared(qtbot, w, quantized)
    key = ov.frames_key
    assert key.isVisible()
    top_js = max(r["js_divergence"] for r in held.comparison.heads)
    assert key.key is not None and key.key.top == pytest.approx(top_js)
    assert f"JS divergence from {held.name_b}, bits" in key.title.text()
    assert key.low.text() == "0" and key.high.text() == f"{top_js:.3g}"
    assert top_js < 5e-5 and f"(JS {top_js:.4g} bits)" in held.status()  # (it said "JS 0.0000 bits")
    top_head = max(held.divergence(w.session.blocks).items(), key=lambda kv: kv[1])[0]
    assert ov.frame_colours[top_head] == key.key.colour(top_js) == DIVERGENCE_COLOURS[-1]
    # the strip's pixels: white-ish at 0, the darkest frame's colour at the top
    img = key.strip.grab().toImage()
    y = img.height() // 2
    left, right = QColor(img.pixel(3, y)), QColor(img.pixel(img.width() - 4, y))
    want_l, want_r = QColor(DIVERGENCE_COLOURS[0]), QColor(DIVERGENCE_COLOURS[-1])
    assert all(abs(a - b) <= 12 for a, b in zip(left.getRgb()[:3], want_l.getRgb()[:3])), left.getRgb()
    assert all(abs(a - b) <= 12 for a, b in zip(right.getRgb()[:3], want_r.getRgb()[:3])), right.getRgb()
    if os.environ.get("ATTNVIZ_SHOT"):  # a look as a user would (cmp27's own check)
        w.grab().save(os.environ["ATTNVIZ_SHOT"])
    with qtbot.waitSignal(w.session.comparison_changed, timeout=10000):
        w.compare.stop()
    qtbot.waitUntil(lambda: not key.isVisible(), timeout=10000)
    assert key.key is None


def test_the_exported_overview_draws_the_same_key(qtbot, real_window, quantized):
    """The figure of the compared Overview (File ▸ Export view) carries the key under its grid: the same words
    and numbers, its strip running from the scale's white to its darkest red, over 0..top."""
    from matplotlib.colors import to_hex

    from attnviz.core.view import DIVERGENCE_COLOURS
    from attnviz.figures import render_figure

    w = real_window
    held, ov = _compared(qtbot, w, quantized)
    s = w.session
    name, sel = w.figure_selection(ov)
    style = held.overview_style(s.blocks, sel.block)
    assert style.frames_key == held.frames_key(s.blocks)
    fig = render_figure(s.result, name, sel, style)
    texts = " ".join(t.get_text() for t in fig.texts).replace("\n", " ")
    assert f"frame colour: JS divergence from {held.name_b}, bits" in texts and style.frames_key.note in texts
    strips = [ax for ax in fig.axes if ax.images and ax.images[0].get_array().ndim == 3]
    assert len(strips) == 1
    ax = strips[0]
    top = style.frames_key.top
    assert ax.get_xlim() == pytest.approx((0.0, top))
    assert [t.get_text() for t in ax.get_xticklabels()] == [text for _, text in style.frames_key.ticks()]
    rgb = ax.images[0].get_array()
    assert to_hex(rgb[0, 0]) == DIVERGENCE_COLOURS[0] and to_hex(rgb[0, -1]) == DIVERGENCE_COLOURS[-1]
    grid_bottom = min(a.get_position().y0 for a in fig.axes if a is not ax and a.get_position().width < 0.3)
    assert ax.get_position().y1 < grid_bottom  # under the grid, not over a head


def test_a_model_against_itself_has_no_frames_and_no_key(qtbot, real_window):
    w = real_window
    open_and_wait(qtbot, w, DEMO, text=TEXT)
    w.select_view("overview")
    with qtbot.waitSignal(w.session.comparison_changed, timeout=60000):
        w.compare.compare_with(DEMO)
    qtbot.waitUntil(lambda: w.overview._frames_for is not None and w.session.comparison is not None, timeout=10000)
    assert not w.overview.frames and not w.overview.frames_key.isVisible()
