"""ux29: the Overview figure kept a fixed 0.9-in margin for its colour bar, its tick labels and its label, so a
single-column figure at ``--font-size 11`` cut the label's second line, "(fixed 0–1)", at the page's right edge (at
10 it touched it); a text strip's bar sat 0.24 in above the page's bottom at any font.  The margins are now what
those texts take; every text of the figure lies on the page."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from figure_data import encdec_result
from matplotlib.text import Text

from attnviz.core import view as vm
from attnviz.figures import FigureSpec
from attnviz.figures.render import render_spec


def _off_page(fig) -> list[tuple[str, float]]:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    page = fig.bbox
    # a hidden axis's tick labels (the image view's pictures) are never drawn
    hidden = {id(t) for ax in fig.axes if not ax.axison for t in (*ax.get_xticklabels(), *ax.get_yticklabels())}
    out = []
    for t in fig.findobj(Text):
        if not t.get_visible() or not t.get_text().strip() or id(t) in hidden:
            continue
        box = t.get_window_extent(renderer)
        over = max(page.x0 - box.x0, box.x1 - page.x1, page.y0 - box.y0, box.y1 - page.y1)
        if over > 0.5:  # pixels
            out.append((t.get_text(), round(float(over), 1)))
    return out


@pytest.mark.parametrize("scale", ["fixed", "shared"])
@pytest.mark.parametrize("width", ["single", None])
@pytest.mark.parametrize("font", [7, 8, 9, 11, 12])
def test_every_text_of_the_overview_is_on_the_page(width, font, scale):
    """(the shared scale's longer label, "(shared by every head)", was cut from --font-size 8 on)"""
    result = encdec_result()
    spec = FigureSpec(view="overview", block="decoder cross", width=width, font_size=font, dpi=100, scale=scale)
    fig = render_spec(result, spec)
    assert _off_page(fig) == []
    label = fig.axes[-1].yaxis.label.get_text()
    assert label.replace("\n", " ") == vm.overview_label(False, scale, None)  # the whole label, wrapped at most


@pytest.mark.parametrize("width", ["single", None])
@pytest.mark.parametrize("font", [7, 9, 11, 12])
def test_every_text_of_a_text_strip_is_on_the_page(width, font):
    """The strip of a translation (each target word under its source shaded) kept its colour bar 0.24 in above the
    page's bottom whatever the font: from --font-size 9 its label, under the bar's tick labels, ran off the page."""
    result = encdec_result()
    spec = FigureSpec(view="strip", width=width, font_size=font, dpi=100)
    fig = render_spec(result, spec)
    assert _off_page(fig) == []
    assert fig.axes[-1].xaxis.label.get_text().startswith("attention weight")


@pytest.mark.parametrize("heads", [None, [0, 1]])
@pytest.mark.parametrize("width", ["single", None])
@pytest.mark.parametrize("font", [9, 11, 12])
def test_the_image_views_lowest_tick_stays_on_the_page(width, font, heads):
    """The image view's colour bar stood 0.05 in above the page's bottom at any font, its lowest tick label centred on
    its end: at --font-size 11 the "0" was cut in half."""
    from figure_data import vision_result

    spec = FigureSpec(
        view="image", width=width, font_size=font, dpi=100, heads=heads, head=None if heads else 0, image_scale="shared"
    )
    fig = render_spec(vision_result(), spec)
    assert _off_page(fig) == []


def test_the_image_view_at_the_default_font_is_as_before():
    """(7 pt: the margin as it was; the figure's size in inches unchanged)"""
    from figure_data import vision_result

    fig = render_spec(vision_result(), FigureSpec(view="image", dpi=100, head=0))
    bar = fig.axes[-1].get_position()
    assert bar.y0 * fig.get_figheight() == pytest.approx(0.05, abs=0.5 / 100)  # (the height is whole pixels)
