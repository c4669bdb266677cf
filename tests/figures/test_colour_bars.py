"""Colour bars in figures: a handful of round ticks and a label that stays on the page, however short the map."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from conftest import text_result

from attnviz.figures import FigureSpec, render_spec


@pytest.mark.parametrize("tokens", [["a", "b"], [f"w{i}" for i in range(40)]])
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
