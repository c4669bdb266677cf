"""The window builds a view's widgets the first time the view is shown (or one of them is asked for), not when it
opens: counted in the window's widget tree, and checked against the raw maps once built."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from gui_helpers import open_and_wait
from PySide6.QtWidgets import QTableWidget, QWidget

from attnviz.gui.views.heatmap import HeatmapWidget


def _count(window, kind) -> int:
    return sum(isinstance(w, kind) for w in window.findChildren(QWidget))


def _built(window) -> set[str]:
    return {title for title, view in window.views.items() if view.built}


def test_an_open_window_builds_no_view_until_one_has_something_to_draw(window, qtbot):
    # before this change the window held 7 pyqtgraph views (Overview 1, Head map 2, Alignment 2, Image and Audio
    # regions 1 each) and the stats table from the start
    assert _count(window, pg.GraphicsView) == 0 and _count(window, QTableWidget) == 0
    assert _built(window) == set()
    assert window.overview.isVisible() and window.overview.message.startswith("Open a model")  # its placeholder


def test_a_view_is_built_when_shown_and_draws_the_maps_it_is_asked_for(window, files, qtbot):
    open_and_wait(qtbot, window, files["text.onnx"])
    # the tab on screen was built; the hidden ones were not, though the result reached them
    assert _built(window) == {"Overview"}
    assert _count(window, pg.GraphicsView) == 1 and _count(window, HeatmapWidget) == 0
    assert len(window.overview.thumbs) == 6 * 12  # every head of the fake encoder, drawn
    # selection changes and a second run while the Head map is hidden leave it unbuilt
    window.session.select(mode="head", layer=4, head=7)
    window.session.select(log=True)
    window.session.select(log=False)
    assert _built(window) == {"Overview"}

    window.select_view("heatmap")
    assert _built(window) == {"Overview", "Head map"}
    assert _count(window, HeatmapWidget) == 1 and _count(window, pg.GraphicsView) == 3  # its map and series plots
    hm = window.head_map.heatmap
    assert hm.isVisible() and hm.plot.isVisible()  # shown at once, not at the next turn of the event loop
    assert hm.width() > window.head_map.width() / 2 and hm.height() > window.head_map.height() / 2
    # the head asked for while the view was hidden: the raw map of the run, layer 4 head 7
    result = window.session.result
    raw = result.maps[4].head(0, 7)
    np.testing.assert_array_equal(hm.image.image, raw)
    assert "layer 4" in hm.mv.title and "head 7" in hm.mv.title


def test_asking_for_a_views_widget_builds_that_view_only(window, files, qtbot):
    open_and_wait(qtbot, window, files["text.onnx"])
    assert _count(window, QTableWidget) == 0
    table = window.stats.table  # a test or a caller reading the widget before the tab was shown
    assert window.stats.built and _count(window, QTableWidget) == 1 and table in window.findChildren(QTableWidget)
    assert _built(window) == {"Overview", "Head stats"}
    # shown, it fills the rows of the selected block: one per (layer, head), from the worker
    window.select_view("stats")
    qtbot.waitUntil(lambda: table.rowCount() == 6 * 12, timeout=10000)
    pairs = {(int(table.item(r, 0).value), int(table.item(r, 1).value)) for r in range(table.rowCount())}
    assert pairs == {(layer, h) for layer in range(6) for h in range(12)}


def test_a_view_whose_model_lacks_its_attention_shows_its_reason_unbuilt(window, files, qtbot):
    open_and_wait(qtbot, window, files["text.onnx"])
    window.select_view("image")
    assert "image" in window.image_regions.message.lower()  # the text model has no image: the reason, not a plot
    assert not window.image_regions.built
    window.select_view("audio")
    assert window.audio_regions.message and not window.audio_regions.built
    assert _count(window, pg.GraphicsView) == 1  # the Overview's only
