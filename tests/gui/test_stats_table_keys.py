"""↑/↓ in the focused Head stats table move through its rows, in its sort order, selecting each row's head (the
window's ↑/↓ layer shortcuts took the keys from the table); ←/→ still step heads."""

from __future__ import annotations

from gui_helpers import open_and_wait
from PySide6.QtCore import Qt

from attnviz.app import rules


def test_up_down_move_through_the_focused_table(qtbot, window, files):
    w = window
    open_and_wait(qtbot, w, files["text.onnx"])
    w.select_view("stats")
    v, t = w.stats, w.stats.table
    qtbot.waitUntil(lambda: t.rowCount() == 72, timeout=10000)  # computed in a worker
    t.sortItems(v.columns.index("entropy"), Qt.SortOrder.AscendingOrder)  # rows not in layer/head order
    heads = [(int(v.cell(r, 0).value), int(v.cell(r, 1).value)) for r in range(t.rowCount())]
    w.session.select(layer=heads[0][0], head=heads[0][1], mode="head")
    t.setFocus()
    qtbot.waitUntil(t.hasFocus)

    for key, row in ((Qt.Key.Key_Down, 1), (Qt.Key.Key_Down, 2), (Qt.Key.Key_Up, 1)):
        qtbot.keyClick(t, key)
        assert (w.session.sel.layer, w.session.sel.head) == heads[row]  # the row's head, not the next layer
        assert t.currentRow() == row
        assert [i.row() for i in t.selectionModel().selectedRows()] == [row]
        assert w.tabs.currentWidget() is v and t.hasFocus()  # still on the table: the next key moves on
    qtbot.keyClick(t, Qt.Key.Key_Up)
    qtbot.keyClick(t, Qt.Key.Key_Up)  # at the first row: stays there
    assert t.currentRow() == 0 and (w.session.sel.layer, w.session.sel.head) == heads[0]

    blk = w.session.block
    want = rules.head_step(w.session.sel, blk.n_layers, blk.heads_in, 1)  # what → does outside the table
    qtbot.keyClick(t, Qt.Key.Key_Right)  # ←/→ keep stepping heads
    assert (w.session.sel.layer, w.session.sel.head) == tuple(want)
    assert tuple(want) not in (heads[0], heads[1])


def test_up_down_step_layers_elsewhere(qtbot, window, files):
    w = window
    open_and_wait(qtbot, w, files["text.onnx"])
    w.session.select(layer=2, head=3, mode="head")
    qtbot.keyClick(w.tabs, Qt.Key.Key_Down)
    assert (w.session.sel.layer, w.session.sel.head) == (3, 3)
