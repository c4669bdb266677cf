"""The one table of view names: the ``--view`` value (``attnviz figure`` and ``attnviz open``), the window's tab
title, and whether a figure draws it.  The window's tabs, ``--view``'s choices and the export's figure view all
read it, so a name cannot mean one view on screen and another on paper."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ViewName:
    key: str  # the --view value and FigureSpec.view
    tab: str | None  # the window's tab title; None: a figure only (the strip)
    figure: bool = True  # `attnviz figure` draws it (the stats table is a tab only)


# in the order `attnviz figure --view` lists them
VIEW_NAMES = (
    ViewName("heatmap", "Head map"),
    ViewName("overview", "Overview"),
    ViewName("links", "Token links"),
    ViewName("alignment", "Alignment"),
    ViewName("image", "Image regions"),
    ViewName("audio", "Audio regions"),
    ViewName("strip", None),
    ViewName("stats", "Head stats", figure=False),
)
BY_KEY = {v.key: v for v in VIEW_NAMES}
OLD_NAMES = {"head": "heatmap"}  # the Head map tab's old --view name, still accepted
FIGURE_VIEWS = tuple(v.key for v in VIEW_NAMES if v.figure)
TAB_VIEWS = tuple(v.key for v in VIEW_NAMES if v.tab is not None)


def tab_title(key: str) -> str:
    """The window's tab title of a view key (KeyError for a figure-only or unknown view)."""
    title = BY_KEY[key].tab
    if title is None:
        raise KeyError(key)
    return title


def view_key(name: str) -> str | None:
    """The key a user's name for a view means: a key, an old name, or a tab title (any case); None if none."""
    name = str(name).strip().lower()
    name = OLD_NAMES.get(name, name)
    if name in BY_KEY:
        return name
    return next((v.key for v in VIEW_NAMES if v.tab is not None and v.tab.lower() == name), None)
