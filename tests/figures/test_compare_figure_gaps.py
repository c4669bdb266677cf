"""``compare --figure``: each colour bar's words belong to their own panel.

On all-MiniLM-L6-v2 against its int8 copy (cmpaudit26) the words of A's colour bar ("attention weight (fixed
0–1)") ended 0.08 in from B's map and read as B's axis title, and B's as A − B's.  Reference: the drawn figure's
own extents (matplotlib's renderer): the gap from a bar's label to the next map is at least a third of an inch,
and the maps are as wide as before the gap grew (the figure widened instead)."""

from __future__ import annotations

import pytest
from onnx_builders import tiny_text_model

pytest.importorskip("matplotlib")


@pytest.mark.parametrize("text", ["the cat sat on a mat", "the cat sat on a mat the dog ran home a cat sat on the mat"])
def test_a_colour_bar_label_stands_clear_of_the_next_panel(tmp_path, text):
    from attnviz.core.view import Selection
    from attnviz.figures import render_compare_figure
    from attnviz.runtime import open_model

    a = tiny_text_model(tmp_path / "a.onnx", layers=1, heads=2, d=8, seed=5)
    r = open_model(a, provider="cpu").analyze(text=text)
    fig = render_compare_figure(r, r, Selection(block=0, layer=0, head=0, mode="head"))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    panels = fig.axes[:3]
    for left, right in zip(panels, panels[1:]):
        label = left.images[0].colorbar.ax.yaxis.label.get_window_extent(renderer)
        gap_in = (right.get_window_extent(renderer).x0 - label.x1) / fig.dpi
        assert gap_in >= 0.3, gap_in
    n_keys = len(r.tokens.labels)
    width_in = panels[0].get_window_extent(renderer).width / fig.dpi
    assert width_in >= min(1.2, 0.1 * n_keys), width_in  # the maps did not shrink to make the room
