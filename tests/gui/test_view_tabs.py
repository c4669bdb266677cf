"""The window's tabs are titled from the one view-name table (core.view_names), and `--view` names select them."""

from __future__ import annotations

from attnviz.core.view_names import TAB_VIEWS, tab_title


def test_the_windows_tabs_are_titled_from_the_registry(window):
    titles = [window.tabs.tabText(i) for i in range(window.tabs.count())]
    want = ["Overview", "Head map", "Token links", "Alignment", "Image regions", "Audio regions", "Head stats"]
    assert sorted(tab_title(k) for k in TAB_VIEWS) == sorted(want) and set(want) <= set(titles)
    for key in (*TAB_VIEWS, "head"):
        window.select_view(key)
        assert window.tabs.tabText(window.tabs.currentIndex()) == tab_title("heatmap" if key == "head" else key)
