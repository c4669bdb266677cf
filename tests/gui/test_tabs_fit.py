"""Every tab of the view bar can be seen and clicked, its title whole, at the window sizes a researcher's laptop
gives (1280×800): the seventh, Head stats, was scrolled out of sight behind two arrow buttons.  The room comes from
the docks, so the window still shrinks as far as before (a tiled half screen)."""

from __future__ import annotations

import pytest
from gui_helpers import open_and_wait
from PySide6.QtWidgets import QApplication


@pytest.mark.parametrize("size", [(1280, 800), (1400, 900), (1920, 1080)])
def test_every_tab_is_on_screen_with_its_whole_title(qtbot, window, files, size):
    window.resize(*size)
    open_and_wait(qtbot, window, files["text.onnx"])
    qtbot.waitUntil(lambda: window.width() == size[0])
    bar = window.tabs.tabBar()
    shown = bar.rect()
    for i in range(bar.count()):
        r = bar.tabRect(i)
        assert shown.contains(r), (bar.tabText(i), r, shown)
        assert bar.tabAt(r.center()) == i
        assert r.width() >= bar.tabSizeHint(i).width()  # not squeezed: the whole title
    assert window.right_dock.width() >= 240 and window.left_dock.width() >= 240  # the docks keep a usable width


def test_the_window_still_shrinks_below_the_tabs_width(qtbot, window, files):
    open_and_wait(qtbot, window, files["text.onnx"])
    assert window.minimumSizeHint().width() < 700
    window.resize(900, 700)
    qtbot.waitUntil(lambda: window.width() == 900)
    assert window.right_dock.width() >= 200 and window.tabs.width() > 0


def test_a_window_sized_before_it_is_shown_fits_its_tabs(qtbot, settings, files):
    """As ``attnviz open --size 1280x800`` makes it: resized, then shown."""
    from fakes import make_opener
    from gui_helpers import FAKE_MODELS

    from attnviz.gui.main_window import MainWindow

    w = MainWindow(opener=make_opener(FAKE_MODELS), settings=settings)
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    qtbot.waitExposed(w)
    bar = w.tabs.tabBar()
    last = bar.count() - 1
    qtbot.waitUntil(lambda: bar.rect().contains(bar.tabRect(last)), timeout=5000)
    assert bar.tabRect(last).width() >= bar.tabSizeHint(last).width()
    w.workers.cancel()


@pytest.mark.parametrize("height", [768 - 80, 600])
def test_a_short_window_scrolls_the_input_panel_and_cuts_none_of_its_fields(qtbot, window, files, height):
    """A 1366×768 laptop's screen less its panels: the window takes that height (its fields once set the minimum,
    720 px), and the Input & view panel scrolls, a scroll bar's width wider, its fields as wide as at full size."""
    open_and_wait(qtbot, window, files["text.onnx"])
    window.resize(1100, height)
    qtbot.waitUntil(lambda: window.height() == height)
    scroll = window.left_dock.widget()
    panel = scroll.widget()
    qtbot.waitUntil(lambda: scroll.verticalScrollBar().isVisible())
    assert scroll.verticalScrollBar().maximum() > 0  # the fields are taller than the panel: it scrolls
    qtbot.waitUntil(lambda: scroll.viewport().width() >= panel.minimumSizeHint().width())
    assert panel.width() >= panel.minimumSizeHint().width()  # no field cut under the scroll bar


def _box_in_view(row, box) -> bool:
    """The head box lies whole inside the row's visible part."""
    top_left = box.mapTo(row.viewport(), box.rect().topLeft())
    return row.viewport().rect().contains(top_left) and row.viewport().rect().contains(
        box.mapTo(row.viewport(), box.rect().bottomRight())
    )


def test_token_links_of_a_12_head_model_keeps_the_asked_width_and_the_sidebar(qtbot, window, files):
    """ux29: a 12-head model's (BERT-base's) head boxes sat in one row with the links-against and find boxes, so the
    Token links tab asked 859 px: `open --size 1000x650 --view links` drew a 1279-px window, and the Model sidebar,
    squeezed to 70 px, showed its property names only, even after leaving the tab.  The boxes now have a row of
    their own that scrolls sideways, each box reachable and whole."""
    open_and_wait(qtbot, window, files["text.onnx"])  # FAKE_MODELS: 12 heads a layer
    window.resize(1000, 650)
    qtbot.waitUntil(lambda: window.width() == 1000)
    window.select_view("links")
    v = window.links
    assert len(v.head_boxes) == 12
    QApplication.processEvents()
    assert window.minimumSizeHint().width() <= 1000
    qtbot.waitUntil(lambda: window.width() == 1000)
    qtbot.waitUntil(lambda: window.right_dock.width() >= 240)  # the sidebar as wide as on the other tabs
    assert window.width() == 1000
    row = v.heads_scroll
    assert row.horizontalScrollBar().isVisible()  # 12 boxes are wider than the middle of a 1000-px window
    for box in (v.head_boxes[0], v.head_boxes[-1]):
        row.ensureWidgetVisible(box)
        QApplication.processEvents()
        assert _box_in_view(row, box), box.text()
    window.select_view("overview")
    QApplication.processEvents()
    assert window.width() == 1000 and window.right_dock.width() >= 240


def test_token_links_of_a_12_head_model_shows_every_head_box_at_1400(qtbot, window, files):
    """At the default 1400 px the 12 boxes fit their row: no sideways bar, no blank band where it would be."""
    open_and_wait(qtbot, window, files["text.onnx"])
    window.resize(1400, 900)
    qtbot.waitUntil(lambda: window.width() == 1400)
    window.select_view("links")
    v = window.links
    QApplication.processEvents()
    row = v.heads_scroll
    qtbot.waitUntil(lambda: all(_box_in_view(row, b) for b in v.head_boxes))
    assert not row.horizontalScrollBar().isVisible()
    assert row.height() == max(b.sizeHint().height() for b in v.head_boxes)
