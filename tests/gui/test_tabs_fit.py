"""Every tab of the view bar can be seen and clicked, its title whole, at the window sizes a researcher's laptop
gives (1280×800): the seventh, Head stats, was scrolled out of sight behind two arrow buttons.  The room comes from
the docks, so the window still shrinks as far as before (a tiled half screen)."""

from __future__ import annotations

import pytest
from gui_helpers import open_and_wait


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
