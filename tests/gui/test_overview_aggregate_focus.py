"""The overview frames what the other views draw: under "mean over heads" (what a result opens on) every head of
the layer range, named as the Head map's title names it, and ←/→ step from there into that range's first / last
head (the old frame sat on head 0 with "focus: … head 0", and → skipped head 0)."""

from __future__ import annotations

from gui_helpers import open_and_wait
from PySide6.QtCore import Qt


def _frame_holds(ov, key) -> bool:
    return ov.focus_box.rect().contains(ov.cells[key])


def test_mean_frames_the_whole_layer_and_names_it(qtbot, window, files):
    open_and_wait(qtbot, window, files["text.onnx"])  # 6 layers × 12 heads: opens on the mean over layer 5
    ov = window.overview
    sel = window.session.sel
    assert (sel.mode, sel.layer_lo, sel.layer_hi) == ("mean", 5, 5)
    assert ov.focus_box.isVisible()
    assert all(_frame_holds(ov, (0, 5, h)) for h in range(12))
    assert not any(_frame_holds(ov, (0, 4, h)) for h in range(12))
    text = ov.info.text()
    assert "focus: encoder self-attention · layer 5 · mean over heads" in text
    assert "head 0" not in text


def test_layer_range_framed_then_arrows_enter_it(qtbot, window, files):
    open_and_wait(qtbot, window, files["text.onnx"])
    window.session.select(mode="max", layer_lo=2, layer_hi=3)
    ov = window.overview
    assert all(_frame_holds(ov, (0, layer, h)) for layer in (2, 3) for h in range(12))
    assert not _frame_holds(ov, (0, 1, 0)) and not _frame_holds(ov, (0, 4, 0))
    assert "layers 2–3 · max over heads" in ov.info.text()
    window.tabs.setFocus()
    qtbot.keyClick(window.tabs, Qt.Key_Right)  # into the range's first head
    sel = window.session.sel
    assert (sel.mode, sel.layer, sel.head) == ("head", 2, 0)
    assert ov.focus_box.rect().center() == ov.cells[(0, 2, 0)].center()
    assert "layer 2 · head 0" in ov.info.text()
    window.session.select(mode="max")
    qtbot.keyClick(window.tabs, Qt.Key_Left)  # into the range's last head
    sel = window.session.sel
    assert (sel.mode, sel.layer, sel.head) == ("head", 3, 11)


def _selected_heads(stats) -> set[tuple[int, int]]:
    t = stats.table
    rows = {i.row() for i in t.selectionModel().selectedRows()}
    return {(int(stats.cell(r, 0).value), int(stats.cell(r, 1).value)) for r in rows}


def test_head_stats_selects_the_heads_the_views_draw(qtbot, window, files):
    open_and_wait(qtbot, window, files["text.onnx"])  # the mean over layer 5
    window.select_view("stats")
    stats = window.stats
    qtbot.waitUntil(lambda: stats.table.rowCount() == 6 * 12, timeout=20000)
    assert _selected_heads(stats) == {(5, h) for h in range(12)}
    window.session.select(mode="head", layer=2, head=7)
    assert _selected_heads(stats) == {(2, 7)}
    window.session.select(mode="rollout", layer_lo=0, layer_hi=1)
    assert _selected_heads(stats) == {(layer, h) for layer in (0, 1) for h in range(12)}


def test_head_stats_scrolls_its_selection_into_view(qtbot, window, files):
    """The selected rows are scrolled to once the table is filled (the scroll was lost on the rows just added)."""
    open_and_wait(qtbot, window, files["text.onnx"])  # 72 rows: layer 5's are below the fold at this size
    window.select_view("stats")
    stats = window.stats
    qtbot.waitUntil(lambda: stats.table.rowCount() == 6 * 12, timeout=20000)
    t = stats.table
    rows = sorted({i.row() for i in t.selectionModel().selectedRows()})
    assert rows and rows[0] >= 60  # layer 5's rows, sorted by layer: below the fold of a 72-row table
    vis = t.viewport().rect()
    assert all(vis.intersects(t.visualItemRect(t.item(r, 0))) for r in rows)  # scrolled to: all 12 rows on screen
    window.session.select(mode="head", layer=0, head=1)
    assert t.viewport().rect().intersects(t.visualItemRect(t.item(1, 0)))  # and back up to a head clicked above
