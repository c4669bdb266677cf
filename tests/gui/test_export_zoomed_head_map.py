"""File ▸ Export view of a zoomed-in Head map exports what the view shows (a 2,048-token map found and zoomed to 32
rows exported the whole map, one label in sixteen): the visible rows and keys, by position, as ``figure --span
--key-span`` draws them, its cells the map's own; the whole map in view exports the whole map, as before."""

from __future__ import annotations

import numpy as np
from gui_helpers import open_and_wait
from PySide6.QtCore import QRectF

import attnviz.gui.main_window as main_window
from attnviz.figures import render_figure

TEXT = " ".join(f"w{i}" for i in range(300))


def _exported(qtbot, window, tmp_path, monkeypatch, name):
    seen = []
    real = main_window.save_with_recipe

    def spy(result, view, sel, path, style, sources):
        seen.append((result, view, sel, style))
        return real(result, view, sel, path, style, sources)

    monkeypatch.setattr(main_window, "save_with_recipe", spy)
    out = tmp_path / name
    window.export_view(out)
    qtbot.waitUntil(lambda: window.last_export == out, timeout=60000)
    return seen[-1]


def test_a_zoomed_head_map_exports_the_positions_in_view(qtbot, window, files, tmp_path, monkeypatch):
    open_and_wait(qtbot, window, files["long.onnx"], text=TEXT)
    window.session.select(mode="head", layer=1, head=2)
    window.select_view("heatmap")
    hm = window.head_map.heatmap
    assert hm.visible_span() is None  # the whole map
    _, _, _, style = _exported(qtbot, window, tmp_path, monkeypatch, "whole.png")
    assert style is None
    hm.vb.setRange(QRectF(90, 100, 60, 40), padding=0)  # keys 90..149, rows 100..139
    assert hm.visible_span() == ((100, 139), (90, 149))
    result, view, sel, style = _exported(qtbot, window, tmp_path, monkeypatch, "zoomed.pdf")
    assert (style.span, style.key_span) == ((100, 139), (90, 149))
    drawn = np.asarray(render_figure(result, view, sel, style).axes[0].images[0].get_array())
    np.testing.assert_array_equal(drawn, window.session.current_map().matrix[100:140, 90:150])
    # and the recipe's spec keeps the window: `figure --recipe` draws the same bytes (the fixture's stand-in opener
    # gets no recipe written, so the check the export makes is asked here)
    from attnviz.figures import encoded_figure
    from attnviz.figures.from_selection import recipe_figure

    out = tmp_path / "zoomed.pdf"
    check = recipe_figure(result, view, sel, style, "pdf", encoded_figure(render_figure(result, view, sel, style), out))
    assert check.spec is not None, check.why_not
    assert (check.spec.span, check.spec.key_span) == ([100, 139], [90, 149])
