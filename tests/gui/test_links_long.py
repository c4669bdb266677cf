"""Token links of a long input paints only what its scroll area shows: 600 tokens are 1,200 labels and up to
7,200 links, all painted on every head switch before, though a screen shows some forty rows.  What is painted
must not change: a part of the canvas (as the scroll area asks for it) is, pixel for pixel, what painting every
label and every link gives there, at the top, in the middle and at the end.  (Against the whole canvas rendered
at once the pixels of long antialiased lines differ a little whichever way it is painted, so the reference is
the same part with nothing left out.)  Of the links that leave the rows in view (a long causal map's rows link
far above them: 17,000 lines crossed the middle of 4,096 tokens, 11 s a paint; MiniLM's rows far below link to
its first token: 2,700-4,300 lines ending in the top rows, 0.5 s a paint) the strongest ``MAX_LEAVING`` are
drawn; the pixel comparison raises it past every link."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QRect
from PySide6.QtGui import QImage, QRegion

from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
from attnviz.gui.views import token_links
from attnviz.gui.views.token_links import LinksCanvas

T = 600


def _links_view() -> vm.LinksView:
    rng = np.random.default_rng(26)
    x = rng.standard_normal((1, 2, T, T)).astype(np.float32) * 3
    i = np.arange(T)
    x[0, :, i, np.maximum(i - 1, 0)] += 6  # a previous-token head: short links
    x[0, 1, :, 0] += 5  # and a sink: links from every row to the first token, crossing every band
    m = np.exp(x - x.max(-1, keepdims=True))
    m /= m.sum(-1, keepdims=True)
    site = SiteInfo("encoder", "self", 0, 2, "softmax_0", "softmax")
    result = AttentionResult([DenseMap(m)], [site], tokens=TokenAxis([f"t{i}" for i in range(T)]))
    return vm.links_view(result, vm.Selection(mode="head", heads=(0, 1)))


def _image(canvas: LinksCanvas, region: QRect) -> QImage:
    img = QImage(canvas.size(), QImage.Format.Format_ARGB32)
    img.fill(0xFF808080)  # grey: where nothing was painted
    canvas.render(img, region.topLeft(), QRegion(region))  # the part alone, as a scroll area's paint asks for it
    return img.copy(region)


@pytest.fixture
def canvas(qtbot):
    c = LinksCanvas()
    qtbot.addWidget(c)
    c.resize(700, 400)
    c.set_data(_links_view())
    c.resize(700, c.minimumHeight())
    return c


@pytest.mark.parametrize("top", [0, 3000, 13244 - 300])
def test_a_part_is_painted_as_with_nothing_left_out(canvas, top, monkeypatch):
    part = QRect(0, top, canvas.width(), 300)
    assert len(canvas.rows_in(top, top + 300)) < 20  # some rows of 600, the rest left out
    monkeypatch.setattr(token_links, "MAX_LEAVING", 10**9)  # nothing left out of the part either
    shown = _image(canvas, part)
    monkeypatch.setattr(canvas, "rows_in", lambda a, b: range(T))
    monkeypatch.setattr(canvas, "links_in", lambda a, b: canvas.visible_links())
    assert _image(canvas, part) == shown


def test_only_the_rows_shown_are_painted(canvas, monkeypatch):
    monkeypatch.setattr(token_links, "MAX_LEAVING", 10**9)  # (the strongest leaving lines: the test below)
    rh = canvas._row_h()
    rows = canvas.rows_in(3000, 3300)
    # row i lies between rh * (i + 1) and rh * (i + 2): by hand, those that reach into 3000..3300
    shown = [i for i in range(T) if rh * (i + 2) > 3000 and rh * (i + 1) < 3300]
    assert set(shown) <= set(rows) and len(rows) <= len(shown) + 2
    lines = canvas.links_in(3000, 3300)
    ys = {lk: (canvas._y(lk[1]), canvas._y(lk[2])) for lk in canvas.links}
    crossing = [lk for lk, (a, b) in ys.items() if min(a, b) <= 3300 and max(a, b) >= 3000]
    assert set(crossing) <= set(lines) and len(lines) < len(canvas.links) / 2  # the sink's long lines, the rest near


@pytest.mark.parametrize("top", [0, 3000])
def test_of_the_lines_that_leave_the_view_the_strongest_are_drawn(canvas, monkeypatch, top):
    rh = canvas._row_h()
    bottom = top + 300
    lo, hi = top - 4 - 1.5 * rh, bottom + 4 - 1.5 * rh  # where a row's line starts, a line's width either side
    through = [lk for lk in canvas.visible_links() if min(lk[1], lk[2]) * rh <= hi and max(lk[1], lk[2]) * rh >= lo]
    inside = [lk for lk in through if lo <= lk[1] * rh <= hi and lo <= lk[2] * rh <= hi]
    leaving = [lk for lk in through if lk not in inside]  # one end beyond the band (the sink's lines), or both
    assert len(inside) > 10 and len(leaving) > 3 * len(inside)
    monkeypatch.setattr(token_links, "MAX_LEAVING", len(leaving) // 3)
    drawn = canvas.links_in(top, bottom)
    strongest = sorted(leaving, key=lambda lk: -lk[3])[: len(leaving) // 3]
    assert set(inside) <= set(drawn) and len(drawn) == len(inside) + len(leaving) // 3
    assert sorted(lk[3] for lk in drawn if lk not in inside) == sorted(lk[3] for lk in strongest)
    assert drawn == [lk for lk in through if lk in set(drawn)]  # in the order they were: painted alike
