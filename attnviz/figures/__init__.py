"""Publication figures with matplotlib (Agg only, no pyplot state, no Qt, no torch).

Public API (the CLI ``attnviz figure`` and the GUI's Export menu both use it)::

    from attnviz.core.view import Selection
    from attnviz.figures import FigureStyle, render_figure, save_figure
    sel = Selection(layer=2, head=1)                  # the view model's selection, as the window holds it
    fig = render_figure(result, "heatmap", sel, FigureStyle(width="single"))
    save_figure(fig, "fig.pdf")                       # atomic; format from the suffix (pdf/svg/png)

``render_spec(result, FigureSpec(...))`` draws a command line's or a recipe's words (resolved once into a
selection).  ``FigureSpec``, ``FigureStyle``, ``VIEWS``, ``WIDTH_PRESETS`` and the recipe helpers import without
matplotlib; ``render_figure``/``save_figure`` load it on first use.
"""

from __future__ import annotations

import importlib

from attnviz.figures.spec import (
    AGGREGATES,
    FORMATS,
    VIEW_HELP,
    VIEWS,
    WIDTH_PRESETS,
    FigureSpec,
    FigureStyle,
)

_LAZY = {
    "render_figure": "attnviz.figures.render",
    "render_diff_figure": "attnviz.figures.render",
    "render_compare_figure": "attnviz.figures.render",
    "render_spec": "attnviz.figures.render",
    "save_figure": "attnviz.figures.render",
    "export_figure": "attnviz.figures.render",
    "figure_bytes": "attnviz.figures.render",
    "figure_format": "attnviz.figures.render",
    "encoded_figure": "attnviz.figures.render",
    "glyph_note": "attnviz.figures.render",
    "applicable_views": "attnviz.figures.render",
    "why_not": "attnviz.figures.render",
    "style": "attnviz.figures.render",
    "make_recipe": "attnviz.figures.recipe",
    "load_recipe": "attnviz.figures.recipe",
    "write_recipe": "attnviz.figures.recipe",
    "recipe_path_for": "attnviz.figures.recipe",
}

__all__ = [
    "AGGREGATES",
    "FORMATS",
    "VIEWS",
    "VIEW_HELP",
    "WIDTH_PRESETS",
    "FigureSpec",
    "FigureStyle",
    *_LAZY,
]


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'attnviz.figures' has no attribute {name!r}")
    return getattr(importlib.import_module(mod), name)
