"""File ▸ Export view of the Overview while heads are switched off draws them as the window does: veiled and
crossed out, and the title says so (the export dropped the crosses).  Checked on the exported PNG's pixels: the
switched-off head's centre (where the cross's two lines meet) has the cross's colour, a head left on keeps its map's
colour there (the panels' places in the PNG: the same figure drawn again here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gui_helpers import open_and_wait
from PIL import Image

from attnviz.app.ablation import AblationState, head_at
from attnviz.core import view as vm
from attnviz.figures import render_figure

DEMO = Path(__file__).resolve().parents[2] / "models" / "sequence-classification.onnx"


def _centre_px(fig, ax, size) -> tuple[int, int]:
    """The centre of ``ax`` in the pixels of a PNG of ``fig`` that is ``size`` (width, height) large."""
    x0, y0, x1, y1 = ax.get_position().extents  # figure fractions, from the bottom
    w, h = size
    return round((x0 + x1) / 2 * w), round((1 - (y0 + y1) / 2) * h)


def test_exported_overview_crosses_out_the_heads_switched_off(qtbot, real_window, tmp_path):
    w = real_window
    open_and_wait(qtbot, w, DEMO, text="3 1 4 1 5 9 2 6")
    w.select_view("overview")
    blocks = w.session.blocks
    w.session.set_ablation(AblationState(frozenset({head_at(blocks, 0, 1, 2)})))  # encoder self 1:2 off
    assert (0, 1, 2) in w.overview.crosses  # crossed on screen
    out = tmp_path / "overview.png"
    with qtbot.waitSignal(w.workers.returned, timeout=60000):
        w.export_view(out)
    qtbot.waitUntil(lambda: out.exists(), timeout=10000)
    png = np.asarray(Image.open(out).convert("RGB")).astype(int)
    _, sel = w.figure_selection(w.overview)
    crossed = render_figure(w.session.result, "overview", sel, w.session.ablation.overview_style(blocks, 0))
    axes = crossed.axes[:-1]  # one per head, row by row (layer 0's four heads, then layer 1's); the colour bar last
    size = (png.shape[1], png.shape[0])
    assert np.allclose(crossed.get_size_inches() * crossed.dpi, size, atol=1)  # the exported figure's layout
    cross = np.array([int(vm.OFF_CROSS[i : i + 2], 16) for i in (1, 3, 5)])
    off_x, off_y = _centre_px(crossed, axes[4 + 2], size)
    on_x, on_y = _centre_px(crossed, axes[4 + 1], size)
    assert np.abs(png[off_y, off_x] - cross).max() <= 40, png[off_y, off_x]
    assert np.abs(png[on_y, on_x] - cross).max() > 40, png[on_y, on_x]
    plain = render_figure(w.session.result, "overview", sel)
    assert vm.OFF_NOTE in crossed.texts[-1].get_text()  # the title says what the crosses mean
    assert vm.OFF_NOTE not in plain.texts[-1].get_text()
