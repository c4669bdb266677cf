"""The find box on Head map and Token links of a long input (300 words): Enter goes to the row holding the typed
token (a map longer than FIND_SPAN rows zooms to that many around it, every row inside; the row is read out with
its strongest key in view, its weight the map's own), Enter again to its next occurrence; Token links scrolls the row into
view and shows only its links.  Nothing found is one line, nothing moved."""

from __future__ import annotations

import numpy as np
from gui_helpers import open_and_wait

from attnviz.gui.views.heatmap import FIND_SPAN

WORDS = [f"w{i}" for i in range(300)]
WORDS[40] = WORDS[210] = "needle"
TEXT = " ".join(WORDS)


def _opened(qtbot, window, files):
    open_and_wait(qtbot, window, files["long.onnx"], text=TEXT)
    window.session.select(mode="head", layer=1, head=2)


def test_head_map_goes_to_the_token_and_to_its_next(qtbot, window, files):
    _opened(qtbot, window, files)
    window.select_view("heatmap")
    view, hm = window.head_map, window.head_map.heatmap
    labels = hm.mv.q_labels
    assert len(labels) == 302 > FIND_SPAN  # [CLS] + words + [SEP]
    found = view.go_to_token("needle")
    assert found is not None and (found.row, found.count, found.nth) == (41, 2, 1)  # [CLS] first
    (x0, x1), (y0, y1) = hm.vb.viewRange()
    assert y0 <= 41 < 42 <= y1 and y1 - y0 == FIND_SPAN and x1 - x0 == FIND_SPAN  # self-attention: keys alike
    k0, k1 = int(round(x0)), int(round(x1))  # the keys in view: the row's strongest of them is read out
    row = np.asarray(hm.mv.matrix[41, k0:k1], np.float64)
    assert hm.hover == (41, k0 + int(np.argmax(row)))
    assert hm.hover_label.text().startswith("1 of 2 · query “needle” (41)")
    assert hm.hover_label.text().endswith(f"{row.max():.4f}")
    again = view.go_to_token("needle")
    assert again.row == 211 and again.nth == 2
    (_, _), (y0, y1) = hm.vb.viewRange()
    assert y0 <= 211 < y1
    assert view.go_to_token("#7").row == 7
    assert view.go_to_token("hay") is None and hm.hover == (-1, -1)
    assert hm.hover_label.text() == "no query row holds “hay”"


def test_token_links_scrolls_to_the_token_and_shows_its_links(qtbot, window, files):
    _opened(qtbot, window, files)
    window.select_view("links")
    links = window.links
    found = links.go_to_token("needle")
    assert found is not None and found.row == 41
    c = links.canvas
    assert c.focus == ("query", 41)
    assert c.visible_links() and all(lk[1] == 41 for lk in c.visible_links())
    top = links.scroller.verticalScrollBar().value()
    assert top <= c._y(41) <= top + links.scroller.viewport().height()
    assert links.go_to_token("needle").row == 211
    top = links.scroller.verticalScrollBar().value()
    assert top <= c._y(211) <= top + links.scroller.viewport().height()
    assert links.go_to_token("hay") is None and c.focus is None
    assert links.info.text() == "no query token “hay”"
