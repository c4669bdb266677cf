"""Colour bars in figures: a handful of round ticks and a label that stays on the page, however short the map."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from figure_data import text_result, vision_result

from attnviz.figures import FigureSpec, render_spec


# a special token to hide: the long label speaks of removed tokens only when some were removed
@pytest.mark.parametrize("tokens", [["[CLS]", "a", "b"], ["[CLS]", *(f"w{i}" for i in range(40))]])
@pytest.mark.parametrize("log", [False, True])
def test_colour_bar_has_few_ticks_and_its_long_label_is_not_clipped(tokens, log):
    result = text_result(n_layers=1, heads=1, tokens=tokens)
    fig = render_spec(result, FigureSpec(hide_special=True, log=log, dpi=72))
    fig.canvas.draw()
    cbar = fig.axes[-1]
    ticks = [t for t in cbar.get_yticklabels() if t.get_text()]
    assert 2 <= len(ticks) <= 6
    label = cbar.yaxis.label
    assert "special tokens removed" in label.get_text().replace("\n", " ")
    box = label.get_window_extent()
    page = fig.bbox
    assert box.y0 >= page.y0 - 0.5 and box.y1 <= page.y1 + 0.5, (box, page)  # wrapped to the bar, not cut off
    assert box.x1 <= page.x1 + 0.5


def test_colour_bar_claims_no_removal_that_did_not_happen():
    """Hiding special tokens on a map that has none removes nothing: the bar says "attention weight", as the
    screen's does (both from the map's notes)."""
    fig = render_spec(text_result(n_layers=1, heads=1, tokens=["a", "b", "c"]), FigureSpec(hide_special=True, dpi=72))
    label = fig.axes[-1].yaxis.label.get_text().replace("\n", " ")
    assert label == "attention weight (stretched to this map)"  # a FigureSpec without a scale: the old stretch


@pytest.mark.parametrize("width_in", [2.4, 3.0, 3.5])
def test_image_colour_bar_labels_stay_on_the_page(width_in):
    """The overlay's bar labels its top with the scale's value (e.g. 0.0296): the tick labels and the bar's words
    get the room they need, not a fixed half inch that pushed the words off the page."""
    fig = render_spec(vision_result(), FigureSpec(view="image", query=0, head=1, dpi=100, width_in=width_in))
    fig.canvas.draw()
    cbar = fig.axes[-1]
    page = fig.bbox
    texts = [t for t in cbar.get_yticklabels() if t.get_text()] + [cbar.yaxis.label]
    assert any("stretched" in t.get_text().replace("\n", " ") for t in texts)
    for t in texts:
        box = t.get_window_extent()
        assert box.x1 <= page.x1 + 0.5 and box.x0 >= page.x0 - 0.5, (t.get_text(), box, page)
