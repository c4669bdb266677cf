"""Image regions: a click on the image makes the patch under it the query ("where does this patch look?"), for
self-attention over patches; the export draws the same query."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gui_helpers import open_and_wait

pytest.importorskip("onnxruntime")
pytest.importorskip("matplotlib")

MODELS = Path(__file__).resolve().parents[2] / "models"


def _click(qtbot, v, x: float, y: float) -> None:
    """A left click at image pixel (x, y) of the view, through the widget as a user's."""
    from PySide6.QtCore import QPointF, Qt

    scene = v.vb.mapViewToScene(QPointF(x, y))
    qtbot.mouseClick(v.glw.viewport(), Qt.MouseButton.LeftButton, pos=v.glw.mapFromScene(scene))


def test_a_clicked_patch_is_the_query_on_screen_and_in_the_export(qtbot, real_window):
    from screen_figure import check_image, figure

    w = real_window
    open_and_wait(qtbot, w, MODELS / "vit-classification.onnx")
    w.select_view("image")
    w.session.select(mode="head", layer=1, head=2)
    v = w.image_regions
    v.draw()
    bi, grid, kind = v.source()
    assert kind == "self" and grid.offset == 1
    h, wd = v._image_size
    before = list(v.queries)
    # a pixel in the third patch row, second column
    x, y = (1.5 / grid.cols) * wd, (2.5 / grid.rows) * h
    _click(qtbot, v, x, y)
    label, row = v.queries[v.query]
    assert (label, row) == ("patch (2, 1)", 1 + 2 * grid.cols + 1)
    assert f"grid {grid.rows}×{grid.cols} (+1 non-patch) · " in v.info.text()  # the [CLS] key before the patches
    assert v.queries[:-1] == before and v.query_bar.buttons[v.query].isChecked()
    # the overlay is that patch's row of layer 1, head 2 over the patches (CLS left out), from the raw map
    site = [i for i, s in enumerate(w.session.result.sites) if s.layer == 1][0]
    want = w.session.result.maps[site].array()[0, 2, row, 1:].reshape(grid.rows, grid.cols)
    np.testing.assert_allclose(v.patch_map, want, rtol=1e-6)
    fig = figure(w, v)
    check_image(w, fig)  # File > Export view: the same query, the same heat
    # the query patch is outlined, on screen and in the figure, on the same cell of the image
    cell = (2 * h / grid.rows, 1 * wd / grid.cols, h / grid.rows, wd / grid.cols)  # y, x, height, width
    assert v.query_outline.isVisible()
    r = v.query_outline.rect()
    assert (r.y(), r.x(), r.height(), r.width()) == pytest.approx(cell)
    from matplotlib.patches import Rectangle

    ax = next(a for a in fig.axes if len(a.images) == 2)
    outlines = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert len(outlines) == 1
    (x0, y0), rw, rh = outlines[0].get_xy(), outlines[0].get_width(), outlines[0].get_height()
    assert (y0 + 0.5, x0 + 0.5, rh, rw) == pytest.approx(cell)  # image pixel edges sit half a pixel off centres
    # a second click replaces the first clicked patch (one button for it); a click off the image changes nothing
    _click(qtbot, v, wd - 0.5, 0.5)
    assert v.queries[v.query] == (f"patch (0, {grid.cols - 1})", grid.cols) and len(v.queries) == len(before) + 1
    _click(qtbot, v, wd + 40, h + 40)
    assert v.queries[v.query] == (f"patch (0, {grid.cols - 1})", grid.cols)
    # back on CLS: no patch is the query, no outline (nor in the figure)
    v.set_query(0)
    assert not v.query_outline.isVisible()
    ax = next(a for a in figure(w, v).axes if len(a.images) == 2)
    assert not ax.patches
