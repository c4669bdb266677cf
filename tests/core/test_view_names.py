"""The one table of view names (core.view_names) is what the CLI offers, what the window's tabs are titled, and
what the export draws: the `--view` choices and tab titles as users know them."""

from __future__ import annotations

import pytest

from attnviz.core.view_names import FIGURE_VIEWS, tab_title, view_key


def test_figure_view_choices_are_the_registry_and_each_is_described_and_drawn():
    from attnviz.cli import build_parser
    from attnviz.figures.spec import VIEW_HELP

    figure = build_parser()._subparsers._group_actions[0].choices["figure"]
    (view,) = [a for a in figure._actions if "--view" in a.option_strings]
    assert (
        tuple(view.choices) == FIGURE_VIEWS == ("heatmap", "overview", "links", "alignment", "image", "audio", "strip")
    )
    assert tuple(VIEW_HELP) == FIGURE_VIEWS
    pytest.importorskip("matplotlib")
    from attnviz.figures.views import VIEW_DRAWERS

    assert tuple(VIEW_DRAWERS) == FIGURE_VIEWS


def test_names_users_type_mean_one_view():
    assert [view_key(n) for n in ("HEATMAP", "head", "Head map", "token links", "Image regions", "stats")] == [
        "heatmap",
        "heatmap",
        "heatmap",
        "links",
        "image",
        "stats",
    ]
    assert view_key("pie") is None and view_key("corpus") is None
    with pytest.raises(KeyError):
        tab_title("strip")  # a figure only
