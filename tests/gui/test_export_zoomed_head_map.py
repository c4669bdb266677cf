"""File ▸ Export view of a zoomed-in Head map exports what the view shows (a 2,048-token map found and zoomed to 32
rows exported the whole map, one label in sixteen): the visible rows and keys, by position, as ``figure --span
--key-span`` draws them, its cells the map's own; the whole map in view exports the whole map, as before."""

from __future__ import annotations

import numpy as np
import pytest
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


def test_a_zoomed_map_on_a_stretched_scale_is_coloured_to_the_positions_in_view(
    qtbot, window, files, tmp_path, monkeypatch
):
    """On "map" (and "shared") the zoomed-in Head map's top is the positions in view's once the view settles, the
    exported `figure --span --key-span`'s top (a long causal map's whole top, row 0's 1.0, left a window far from it
    black); the whole map in view again: the whole map's top.  Tops by hand with numpy from the result's maps."""
    open_and_wait(qtbot, window, files["long.onnx"], text=TEXT)
    window.session.select(mode="head", layer=1, head=2, scale="map")
    window.select_view("heatmap")
    hm = window.head_map.heatmap
    whole = window.session.current_map().matrix
    assert hm.colorbar.levels() == pytest.approx((0.0, float(whole.max())))
    with qtbot.waitSignal(hm.stretched, timeout=10000):
        hm.vb.setRange(QRectF(90, 100, 60, 40), padding=0)  # keys 90..149, rows 100..139
    top = float(whole[100:140, 90:150].max())
    assert top < float(whole.max())
    assert hm.colorbar.levels() == pytest.approx((0.0, top), rel=1e-6)
    assert "stretched to the drawn span" in hm.colorbar.axis.labelText
    result, view, sel, style = _exported(qtbot, window, tmp_path, monkeypatch, "zoomed.png")
    fig = render_figure(result, view, sel, style)
    image = fig.axes[0].images[0]
    assert image.norm.vmax == pytest.approx(hm.colorbar.levels()[1], rel=1e-6)  # screen = figure
    assert image.colorbar.ax.get_ylabel().replace("\n", " ") == hm.colorbar.axis.labelText
    # "shared": every head of the block, in view
    maps = [window.session.result.maps[i].head(0, h) for i in range(2) for h in range(3)]
    with qtbot.waitSignal(hm.stretched, timeout=10000):
        window.session.select(scale="shared")
        hm.restretch()
    assert hm.colorbar.levels()[1] == pytest.approx(max(float(m[100:140, 90:150].max()) for m in maps), rel=1e-6)
    assert "shared by the block's heads in the drawn span" in hm.colorbar.axis.labelText
    with qtbot.waitSignal(hm.stretched, timeout=10000):
        hm.vb.setRange(QRectF(0, 0, whole.shape[1], whole.shape[0]), padding=0)  # the whole map again
    assert hm.colorbar.levels()[1] == pytest.approx(max(float(m.max()) for m in maps), rel=1e-6)
    assert "drawn span" not in hm.colorbar.axis.labelText


def test_the_row_scale_from_the_box_is_drawn_and_exported_with_its_recipe(qtbot, window, files, tmp_path, monkeypatch):
    """The colour-scale box's "each row stretched to its maximum": the Head map colours each row over its largest
    weight (by hand with numpy), the hover still reads the weight, and the export draws the same cells with a
    recipe that records the scale (`figure --recipe` draws it again)."""
    open_and_wait(qtbot, window, files["long.onnx"], text=TEXT)
    window.session.select(mode="head", layer=0, head=1)
    window.select_view("heatmap")
    box = window.controls.scale
    box.setCurrentIndex(box.findData("row"))
    assert window.session.sel.scale == "row" and box.currentText() == "each row stretched to its maximum"
    hm = window.head_map.heatmap
    m = window.session.current_map().matrix
    want = m / m.max(axis=1, keepdims=True)
    np.testing.assert_allclose(hm.image.image, want, rtol=1e-6)
    assert hm.colorbar.levels() == (0.0, 1.0) and "each row stretched to its maximum" in hm.colorbar.axis.labelText
    hm.set_hover(5, 3)
    assert hm.hover_label.text().endswith(f"{m[5, 3]:.4f}")  # the weight, not its share of the row's top
    result, view, sel, style = _exported(qtbot, window, tmp_path, monkeypatch, "row.pdf")
    fig = render_figure(result, view, sel, style)
    np.testing.assert_allclose(np.asarray(fig.axes[0].images[0].get_array()), want, rtol=1e-6)
    from attnviz.figures import encoded_figure
    from attnviz.figures.from_selection import recipe_figure

    out = tmp_path / "row.pdf"
    check = recipe_figure(result, view, sel, style, "pdf", encoded_figure(fig, out))
    assert check.spec is not None and check.spec.scale == "row", check.why_not
