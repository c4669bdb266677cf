"""The Head map and Alignment fit their view whatever their title: pyqtgraph makes a title's width its column's
minimum, so at a 1000-px window the speech demo's title ("... · the clip: frames 0–115 of 200 (padding cut)")
widened the plot past the view: the map was cut at 1 s and the colour bar was off screen (a shorter title already
pushed the bar off).  The title is cut with "…" to the room over the map, its tooltip the title whole.  Measured as
drawn: the plot item and the colour bar against the view, in the scene's pixels."""

from __future__ import annotations

import pytest
from gui_helpers import open_and_wait, speech_demo


@pytest.mark.parametrize("view", ["heatmap", "alignment"])
def test_the_map_and_its_colour_bar_fit_a_1000_px_window(qtbot, real_window, view):
    w = real_window
    w.resize(1000, 650)
    open_and_wait(qtbot, w, speech_demo(), timeout=60000)
    w.select_view(view)
    hm = (w.head_map if view == "heatmap" else w.alignment).heatmap
    qtbot.waitUntil(lambda: hm.mv is not None and hm.full_title == hm.mv.title, timeout=10000)
    qtbot.wait(50)  # (the title is fitted again once the axes have their labels' widths)
    pi = hm.plot.getPlotItem()
    room = hm.plot.viewport().width()
    assert pi.sceneBoundingRect().right() <= room + 0.5, (pi.sceneBoundingRect(), room)
    assert hm.colorbar.sceneBoundingRect().right() <= room + 0.5
    assert hm.vb.sceneBoundingRect().width() > 100  # the map itself keeps the room left
    shown, full = pi.titleLabel.text, hm.full_title
    assert "the clip: frames 0–" in full
    assert shown.endswith("…") and full.startswith(shown[:-1])  # the premise: the whole title does not fit
    assert pi.titleLabel.toolTip() == full
    # wider, the title is whole again (no tooltip)
    w.resize(1900, 900)
    qtbot.waitUntil(lambda: pi.titleLabel.text == full, timeout=10000)
    assert pi.titleLabel.toolTip() == ""
