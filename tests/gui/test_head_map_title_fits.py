"""The Head map and Alignment fit their view whatever their title: pyqtgraph makes a title's width its column's
minimum, so at a 1000-px window the speech demo's title ("... · the clip: frames 0–115 of 200 (padding cut)")
widened the plot past the view: the map was cut at 1 s and the colour bar was off screen (a shorter title already
pushed the bar off).  The title is cut with "…" to the room over the map, its tooltip the title whole.  Measured as
drawn: the plot item and the colour bar against the view, in the scene's pixels."""

from __future__ import annotations

import pytest
from gui_helpers import demo, open_and_wait, speech_demo


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


def test_a_narrow_head_map_keeps_which_head_and_a_minus_b_in_its_title(qtbot, real_window, quantized):
    """While comparing, the title's end says what is drawn ("· head 0 · A − B"): a narrow view cuts the block's
    name (the block box names it), not the end (the cut that left "decoder cross-attention · layer 2 · h…")."""

    w = real_window
    w.resize(1000, 650)
    open_and_wait(qtbot, w, demo("sequence-classification"), text="3 1 4 1 5 9 2 6")
    with qtbot.waitSignal(w.session.comparison_changed, timeout=60000):
        w.compare.compare_with(quantized)
    w.select_view("heatmap")
    w.session.select(block=0, layer=1, head=2, mode="head")
    box = w.head_map.show_box
    box.setCurrentIndex(box.findData("diff"))
    hm = w.head_map.heatmap
    qtbot.waitUntil(lambda: hm.mv is not None and hm.full_title.endswith("A − B"), timeout=10000)
    qtbot.wait(50)  # (the title is fitted again once the axes have their labels' widths)
    pi = hm.plot.getPlotItem()
    full, shown = hm.full_title, pi.titleLabel.text
    assert full == "encoder self-attention · layer 1 · head 2 · A − B"  # the head asked for, A − B
    assert shown != full and pi.titleLabel.toolTip() == full  # the premise: the whole title does not fit
    block, _, rest = full.partition(" · ")
    assert shown.endswith("… · layer 1 · head 2 · A − B") and block.startswith(shown.partition("…")[0])
    assert pi.sceneBoundingRect().right() <= hm.plot.viewport().width() + 0.5  # and the plot still fits the view


def test_fit_title_cuts_the_block_name_then_the_end():
    from PySide6.QtGui import QFont, QFontMetrics

    from attnviz.gui.views.heatmap import fit_title

    m = QFontMetrics(QFont())
    full = "decoder cross-attention · layer 2 · head 0 · A − B"
    assert fit_title(full, m, m.horizontalAdvance(full)) == full  # room for it: whole
    rest = " · layer 2 · head 0 · A − B"
    room = m.horizontalAdvance("decoder cr…" + rest)
    got = fit_title(full, m, room)
    assert got.endswith("…" + rest) and "decoder cross-attention".startswith(got.partition("…")[0])
    assert m.horizontalAdvance(got) <= room
    tight = m.horizontalAdvance("dec…" + rest)  # the block name would be cut to a stub: it goes whole
    assert fit_title(full, m, tight) == "…" + rest
    tighter = m.horizontalAdvance(rest) - 1  # the rest alone does not fit: the title is cut at its end
    got = fit_title(full, m, tighter)
    assert got.endswith("…") and full.startswith(got[:-1]) and m.horizontalAdvance(got) <= tighter
