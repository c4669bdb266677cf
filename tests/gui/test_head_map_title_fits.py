"""The Head map and Alignment fit their view whatever their title: pyqtgraph makes a title's width its column's
minimum, so at a 1000-px window the speech demo's title ("... · the clip: frames 0–115 of 200 (padding cut)")
widened the plot past the view: the map was cut at 1 s and the colour bar was off screen.  The title spans the
plot (not the map's column alone) and breaks between its parts onto a second line where one is too narrow; a line
still too wide is cut with "…", the tooltip then the title whole.  At 1000, 1400 and 1600 px the speech demo's
title is said whole (at 1400 px it read "... (pa…").  Measured as drawn: the title's text item, the plot item and
the colour bar against the view, in the scene's pixels."""

from __future__ import annotations

import pytest
from gui_helpers import open_and_wait, speech_demo

from attnviz.core import view as vm


@pytest.mark.parametrize("view", ["heatmap", "alignment"])
def test_the_title_map_and_colour_bar_fit_the_window(qtbot, real_window, view):
    w = real_window
    w.resize(1000, 650)
    open_and_wait(qtbot, w, speech_demo(), timeout=60000)
    w.select_view(view)
    hm = (w.head_map if view == "heatmap" else w.alignment).heatmap
    qtbot.waitUntil(lambda: hm.mv is not None and hm.full_title == hm.mv.title, timeout=10000)
    pi = hm.plot.getPlotItem()
    full = hm.full_title
    assert "layer 1 · head 0" in full and full.endswith("the clip: frames 0–115 of 200 (padding cut)")
    lines_at = {}
    for width, height in ((1000, 650), (1400, 900), (1600, 1000)):
        w.resize(width, height)
        qtbot.waitUntil(lambda: hm.plot.viewport().width() > 0, timeout=5000)
        qtbot.wait(50)  # (the title is fitted again once the axes have their labels' widths)
        room = hm.plot.viewport().width()
        assert pi.sceneBoundingRect().right() <= room + 0.5, (width, pi.sceneBoundingRect(), room)
        assert hm.colorbar.sceneBoundingRect().right() <= room + 0.5
        assert hm.vb.sceneBoundingRect().width() > 100  # the map itself keeps the room left
        title = pi.titleLabel.item.sceneBoundingRect()  # the text as drawn, every line
        assert title.left() >= -0.5 and title.right() <= room + 0.5, (width, title, room)
        lines = pi.titleLabel.text.split("<br>")
        assert vm.TITLE_SEP.join(lines) == full, (width, lines)  # whole: nothing cut, nothing lost
        assert pi.titleLabel.toolTip() == ""
        lines_at[width] = len(lines)
    assert lines_at[1000] == 2 and lines_at[1600] == 1  # the premise: one line does not fit at 1000 px
    # a part wider than the plot: its line is cut with "…" within the view, and the tooltip says the title whole
    hm.full_title = longer = full + vm.TITLE_SEP + "a note " * 80
    hm._show_title()
    assert pi.titleLabel.text.endswith("…") and pi.titleLabel.toolTip() == longer
    qtbot.wait(50)
    assert pi.titleLabel.item.sceneBoundingRect().right() <= hm.plot.viewport().width() + 0.5


def test_title_lines_break_where_the_wider_line_is_narrowest():
    full = "decoder cross-attention · layer 1 · head 0 · the clip: frames 0–115 of 200 (padding cut)"
    assert vm.title_lines(full, len, len(full)) == [full]
    # every break between parts tried by hand: after "head 0" the wider line (44 characters) is narrowest
    assert vm.title_lines(full, len, 60) == [
        "decoder cross-attention · layer 1 · head 0",
        "the clip: frames 0–115 of 200 (padding cut)",
    ]
    assert vm.title_lines("one part only", len, 3) == ["one part only"]  # nothing to break at: the caller cuts it
