"""Token links: query tokens on the left, key tokens on the right, joined by weighted lines (BertViz head view)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPen
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QStyle,
    QVBoxLayout,
    QWidget,
)

from attnviz.core import view as vm
from attnviz.core.view_names import tab_title
from attnviz.gui import style
from attnviz.gui.views.base import View, info_label
from attnviz.gui.views.head_map import find_box

ROW_H = 22  # the smallest row pitch (px): a label's height
MAX_ROW_H = 44  # a short input spreads its rows over the panel up to this pitch (then the lines stay readable)
LINK_SPAN = 380  # max horizontal distance between the token columns, px
MAX_LEAVING = 300  # at most this many links that leave the rows in view are drawn there (the strongest; ~70 ms)
CLIP_PAD = 8.0  # px beyond the painted band a clipped line still runs (more than its widest half and antialiasing)


def _clipped(x1: float, y1: float, x2: float, y2: float, lo: float, hi: float) -> tuple[QPointF, QPointF]:
    """The line's part between heights ``lo`` and ``hi``, the same line: Qt strokes the whole of a line it is
    given, clipped or not, and a long input's links run tens of thousands of pixels (a 4,096-token causal map
    scrolled to its middle: 17,000 lines across the view, 11 s a paint, drawn whole)."""
    if y1 != y2:
        ends = []
        for y in (y1, y2):
            t = (min(max(y, lo), hi) - y1) / (y2 - y1)
            ends.append(QPointF(x1 + t * (x2 - x1), y1 + t * (y2 - y1)))
        return ends[0], ends[1]
    return QPointF(x1, y1), QPointF(x2, y2)


class LinksCanvas(QWidget):
    """Paints the two token columns and the links.

    Signals
    -------
    hovered(str, int)   side ("query"/"key"/"") and index of the token under the cursor
    """

    hovered = Signal(str, int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setMouseTracking(True)
        self.q_labels: list[str] = []
        self.k_labels: list[str] = []
        # the column titles, from the view model as the figure draws them ("target"/"source" for cross-attention)
        self.titles: tuple[str, str] = ("query", "key")
        self.layers: list[tuple[str, np.ndarray]] = []  # (colour, [Tq, Tk])
        self.links: list[tuple[int, int, int, float]] = []  # (layer, q, k, weight / its reference) after top-k
        self.focus: tuple[str, int] | None = None
        self.top_k: int | None = None
        self.font_ = QFont()
        self.font_.setPointSize(10)
        self._col_w = 80
        self._measured: tuple[list[str], list[str]] | None = None  # the labels _col_w was measured for

    def set_data(self, lv: vm.LinksView) -> None:
        """Draw the view model's :class:`~attnviz.core.view.LinksView` (the figure draws the same links)."""
        self.q_labels, self.k_labels = list(lv.q_labels), list(lv.k_labels)
        self.titles = lv.x_titles
        self.layers = [(colour, m) for _, colour, m in lv.items]
        self.links = list(lv.links)  # (item, q, k, weight / vmax)
        self.top_k = vm.LINKS_PER_ROW
        self._vmax = 1.0  # link weights are already relative to their reference (the view model's cut)
        n = max(len(self.q_labels), len(self.k_labels))
        if (self.q_labels, self.k_labels) != self._measured:  # a head switch keeps the tokens: measured once
            fm = QFontMetrics(self.font_)
            self._col_w = min(160, max([fm.horizontalAdvance(s) for s in self.q_labels + self.k_labels] + [30]) + 12)
            self._measured = (self.q_labels, self.k_labels)
        self.setMinimumHeight(n * ROW_H + 2 * ROW_H)
        self.setMinimumWidth(2 * self._col_w + 160)
        if self.focus is not None:
            side, i = self.focus
            if i >= len(self.q_labels if side == "query" else self.k_labels):
                self.focus = None
        self.update()

    def visible_links(self) -> list[tuple[int, int, int, float]]:
        if self.focus is None:
            return self.links
        side, i = self.focus
        pos = 1 if side == "query" else 2
        return [lk for lk in self.links if lk[pos] == i]

    def set_focus(self, side: str | None, index: int = -1) -> None:
        new = (side, index) if side else None
        if new != self.focus:
            self.focus = new
            self.update()
            self.hovered.emit(side or "", index)

    # geometry
    def _x0(self) -> float:
        # keep the link span readable on wide windows (BertViz-like proportions), centred
        used = min(self.width(), 2 * self._col_w + LINK_SPAN)
        return (self.width() - used) / 2.0

    def _x_left(self) -> float:
        return self._x0() + self._col_w

    def _x_right(self) -> float:
        return self.width() - self._x0() - self._col_w

    def _row_h(self) -> float:
        """Row pitch: a short input fills the panel's height (up to MAX_ROW_H) instead of its top third."""
        n = max(len(self.q_labels), len(self.k_labels), 1)
        return float(min(MAX_ROW_H, max(ROW_H, self.height() / (n + 2))))

    def _y(self, i: int) -> float:
        rh = self._row_h()
        return rh * (i + 1) + rh / 2

    def token_at(self, pos: QPointF) -> tuple[str, int] | None:
        rh = self._row_h()
        i = int((pos.y() - rh) // rh)
        if self._x0() <= pos.x() <= self._x_left() + 6 and 0 <= i < len(self.q_labels):
            return "query", i
        if self._x_right() - 6 <= pos.x() <= self.width() - self._x0() and 0 <= i < len(self.k_labels):
            return "key", i
        return None

    def token_pos(self, side: str, i: int) -> QPointF:
        x = self._x_left() - 20 if side == "query" else self._x_right() + 20
        return QPointF(x, self._y(i))

    def mouseMoveEvent(self, ev):
        hit = self.token_at(ev.position())
        self.set_focus(*(hit if hit else (None, -1)))

    def leaveEvent(self, ev):
        self.set_focus(None)

    def rows_in(self, top: float, bottom: float) -> range:
        """The token rows (either column) any part of which lies between ``top`` and ``bottom`` (px)."""
        rh = self._row_h()
        n = max(len(self.q_labels), len(self.k_labels))
        # row i spans rh * (i + 1) .. rh * (i + 2): the column titles take the first row's height
        return range(max(0, int(top // rh) - 1), max(0, min(n, int(bottom // rh))))

    def links_in(self, top: float, bottom: float) -> list[tuple[int, int, int, float]]:
        """The visible links whose line passes between ``top`` and ``bottom`` (px), a line's width either side:
        every one with both ends there, and of those that leave it (one end beyond it, or both), the
        :data:`MAX_LEAVING` strongest."""
        rh, pad = self._row_h(), 4.0
        lo, hi = top - pad - 1.5 * rh, bottom + pad - 1.5 * rh  # _y(i) = rh * i + 1.5 * rh
        shown = [lk for lk in self.visible_links() if min(lk[1], lk[2]) * rh <= hi and max(lk[1], lk[2]) * rh >= lo]
        leaving: list[int] = [
            n for n, lk in enumerate(shown) if not (lo <= lk[1] * rh <= hi and lo <= lk[2] * rh <= hi)
        ]
        if len(leaving) <= MAX_LEAVING:
            return shown
        # a line that leaves the view is drawn there as a near-vertical stroke the band's height (~0.2-0.5 ms
        # each in Qt's raster engine): on a long map thousands of them stack by a column, rows far below linking to
        # a sink token in view (MiniLM at 4,096 tokens: 2,700-4,300 of them, 0.5 s of a head switch's paint) or
        # a long causal map's rows linking far above (17,000 across its middle rows, 11 s a paint)
        weights = [-lk[3] for lk in shown]
        dropped = set(sorted(leaving, key=weights.__getitem__)[MAX_LEAVING:])  # (equal ones: the first kept)
        return [lk for n, lk in enumerate(shown) if n not in dropped]

    def paintEvent(self, ev):
        # only what the scroll area shows: 4,096 tokens are 8,192 labels and up to 49,152 links, all painted on
        # every head switch (61 ms a paint at 2,048 tokens) though a screen shows some forty rows
        area = ev.rect()
        top, bottom = float(area.top()), float(area.bottom() + 1)
        p = QPainter(self)
        p.setRenderHint(QPainter.Antialiasing)
        p.fillRect(area, QColor("white"))
        p.setFont(self.font_)
        xl, xr = self._x_left(), self._x_right()
        p.setPen(QColor("#555"))
        p.drawText(
            QRectF(self._x0(), 0, self._col_w, self._row_h()),
            Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
            f"{self.titles[0]} ",
        )
        p.drawText(
            QRectF(xr, 0, self._col_w, self._row_h()),
            Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
            f" {self.titles[1]}",
        )
        lo, hi = top - CLIP_PAD, bottom + CLIP_PAD
        for li, i, j, w in self.links_in(top, bottom):
            c = QColor(self.layers[li][0])
            a = min(1.0, w / self._vmax)
            c.setAlphaF(vm.link_alpha(a))
            pen = QPen(c)
            pen.setWidthF(0.5 + 3.5 * a)
            p.setPen(pen)
            p.drawLine(*_clipped(xl + 4, self._y(i), xr - 4, self._y(j), lo, hi))
        focus = self.focus
        rh = self._row_h()
        rows = self.rows_in(top, bottom)
        for side, labels, x0, align in (
            ("query", self.q_labels, self._x0(), Qt.AlignmentFlag.AlignRight),
            ("key", self.k_labels, xr, Qt.AlignmentFlag.AlignLeft),
        ):
            for i in rows[: max(0, len(labels) - rows.start)]:
                r = QRectF(x0 + (0 if side == "query" else 6), rh * (i + 1), self._col_w - 6, rh)
                hot = focus is not None and focus == (side, i)
                if hot:
                    p.fillRect(r, QColor(255, 230, 150))
                p.setPen(QColor("black"))
                p.drawText(r, align | Qt.AlignmentFlag.AlignVCenter, labels[i])
        p.end()


class HeadsRow(QScrollArea):
    """The head boxes' row: it scrolls sideways where they are wider than the view, and is as tall as the row, plus
    the sideways bar only while that shows (never cut at the bottom, no blank band under a row that fits)."""

    def __init__(self, bar: QHBoxLayout, parent=None):
        super().__init__(parent)
        self.bar = bar
        boxes = QWidget()
        boxes.setLayout(bar)
        self.setWidgetResizable(True)
        self.setWidget(boxes)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.viewport().setAutoFillBackground(False)  # the view's own background behind the boxes, as before
        boxes.setAutoFillBackground(False)
        self.boxes: Sequence[QWidget] = []
        # a box's height from the start: the view is laid out before its first draw makes the boxes, and a row that
        # came in at a scroll area's default height shrank under the canvas after (moving its tokens while hovered)
        self.setFixedHeight(QCheckBox("0").sizeHint().height())

    def fit(self, boxes: Sequence[QWidget]) -> None:
        self.boxes = boxes
        self._fit_height()

    def row_width(self) -> int:
        """The boxes' width in one row, from their own size hints: in a shown window new boxes are not laid out
        until the event loop runs, so the layout's hint would still count its margins alone."""
        spacing = max(self.bar.spacing(), 0)
        return sum(b.sizeHint().width() for b in self.boxes) + spacing * max(len(self.boxes) - 1, 0)

    def _fit_height(self) -> None:
        row = max((b.sizeHint().height() for b in self.boxes), default=0)
        over = self.row_width() > self.viewport().width()
        bar_px = self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent, None, self) if over else 0
        self.setFixedHeight(row + bar_px)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit_height()


class TokenLinksView(View):
    title = tab_title("links")
    scale_note = "Token links shade each link by its share of what its links-against box names"

    def __init__(self, session, parent=None):
        super().__init__(session, parent)
        self.checked: set[int] = set()
        self._layer_key = None
        self.lv: vm.LinksView | None = None  # what the canvas draws
        self._found_text: str | None = None  # what the find box last went to (Enter again: its next row)

    def build(self) -> None:
        self.canvas = LinksCanvas()
        self.heads_bar = QHBoxLayout()
        self.heads_bar.setContentsMargins(0, 0, 0, 0)
        self.head_boxes: list[QCheckBox] = []
        # the head boxes have a row of their own, which scrolls sideways: beside the links-against and find boxes a
        # 12-head model's boxes (BERT-base) set the tab's minimum width to 859 px, so `open --size 1000x650` drew
        # 1279 px and the Model sidebar, squeezed to 70 px, showed no values (a 32-head model's would not fit a screen)
        self.heads_scroll = HeadsRow(self.heads_bar)
        self.info = info_label()
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.canvas)
        self.scroller = scroll
        self.find_box = find_box(self.go_to_token)
        # what a link is measured against (the view model's LINK_CUTS, the selection's link_cut: the export's too)
        self.cut_box = QComboBox()
        for name, cut in vm.LINK_CUTS.items():
            self.cut_box.addItem(cut.text, name)
            self.cut_box.setItemData(self.cut_box.count() - 1, cut.tip, Qt.ItemDataRole.ToolTipRole)
        self.cut_box.setToolTip(
            "what each link is measured against, for the cut (under 5 % of it: not drawn) and its line's shade; "
            "File ▸ Export view draws the same"
        )
        self.cut_box.currentIndexChanged.connect(lambda _i: self.session.select(link_cut=self.cut_box.currentData()))
        heads = QHBoxLayout()
        heads.addWidget(QLabel("heads:"))
        heads.addWidget(self.heads_scroll, 1)
        top = QHBoxLayout()
        top.addWidget(QLabel("links against:"))
        top.addWidget(self.cut_box)
        top.addStretch(1)
        top.addWidget(QLabel("find:"))
        top.addWidget(self.find_box)
        lay = QVBoxLayout(self.body)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addLayout(heads)
        lay.addLayout(top)
        lay.addWidget(self.info)
        lay.addWidget(scroll, 1)
        self.canvas.hovered.connect(self._on_hover)

    def go_to_token(self, typed: str) -> vm.Found | None:
        """Scroll to the query token ``typed`` names (text or position; again: its next occurrence) and show only
        its links, as hovering it does."""
        lv, c = self.lv, self.canvas
        if lv is None:
            return None
        again = typed == self._found_text and c.focus is not None and c.focus[0] == "query"
        found = vm.find_token(lv.q_labels, _positions(lv), typed, c.focus[1] + 1 if again and c.focus else 0)
        self._found_text = typed
        if found is None:
            c.set_focus(None)
            self.info.setText(f"no {lv.x_titles[0]} token “{typed.strip()}”" if typed.strip() else self.info.text())
            return None
        y = c._y(found.row)
        self.scroller.ensureVisible(int(c._x_left()), int(y), 0, int(self.scroller.viewport().height() * 0.4))
        c.set_focus("query", found.row)
        if found.count > 1:
            self.info.setText(f"{found.nth} of {found.count} · {self.info.text()}")
        return found

    def export_target(self):
        self.ensure_built()
        return self.canvas

    def _rebuild_heads(self, n: int) -> None:
        while self.heads_bar.count():  # the boxes and the stretch after them
            item = self.heads_bar.takeAt(0)
            box = item.widget() if item is not None else None
            if box is not None:
                box.hide()  # deleteLater waits for the event loop; until then an old box would still paint
                box.deleteLater()
        self.head_boxes = []
        for h in range(n):
            b = QCheckBox(f"{h}")
            b.setStyleSheet(f"QCheckBox {{ color: {style.head_color(h)}; font-weight: bold; }}")
            b.toggled.connect(lambda on, h=h: self._toggle(h, on))
            self.heads_bar.addWidget(b)
            self.head_boxes.append(b)
        self.heads_bar.addStretch(1)  # few boxes keep to the left, as before
        self.heads_scroll.fit(self.head_boxes)

    def _toggle(self, h: int, on: bool) -> None:
        if on:
            self.checked.add(h)
        else:
            self.checked.discard(h)
        if not self.checked:  # always show at least the focused head
            self.checked = {self.session.sel.head}
        self.draw()

    def draw(self) -> None:
        s = self.session
        sel = s.sel
        blk = s.block
        n = blk.heads_in(sel.layer)
        if len(self.head_boxes) != n:
            self._rebuild_heads(n)
        layer_key = (id(s.result), sel.block, sel.layer)
        if layer_key != self._layer_key or len(self.checked) <= 1:  # a new layer opens on the view model's heads
            self.checked = set(vm.link_heads(blk, sel)) or {sel.head}
            self._layer_key = layer_key
        self.checked = {h for h in self.checked if h < n} or {sel.head}
        lv = vm.links_view(s.result, sel, sorted(self.checked) if sel.mode == "head" else None, s.blocks)
        for h, b in enumerate(self.head_boxes):
            b.blockSignals(True)
            b.setChecked(sel.mode == "head" and h in self.checked)
            b.setEnabled(sel.mode == "head")
            b.blockSignals(False)
        if self.cut_box.currentData() != sel.link_cut:
            self.cut_box.blockSignals(True)  # showing the selection is not a new choice
            self.cut_box.setCurrentIndex(max(0, self.cut_box.findData(sel.link_cut)))
            self.cut_box.blockSignals(False)
        self.lv = lv
        self.canvas.set_data(lv)
        checked = sorted(self.checked)
        heads = (
            f"head{'s' if len(checked) != 1 else ''} {', '.join(str(h) for h in checked)}"
            if sel.mode == "head"
            else vm.MODE_TITLES[sel.mode]
        )
        # the view model's title (block, layer range, aggregate: "layer 5 · mean over heads" named sel.layer where
        # the mean was over layers 2–3, and no block), with the overlaid heads by number
        several = sel.mode == "head" and len(checked) > 1
        title = lv.title.replace(f" · {len(checked)} heads", f" · {heads}", 1) if several else lv.title
        self.info.setText(f"{title}. Hover a token to show only its links.")
        self.info.setToolTip(
            f"{lv.title}: at most {vm.LINKS_PER_ROW} links per query token, weights of at least "
            f"{vm.LINK_MIN:.0%} of {vm.LINK_CUTS[lv.cut].against} (as in the exported figure)"
        )

    def _on_hover(self, side: str, i: int) -> None:
        if not side:
            return
        labels = self.canvas.q_labels if side == "query" else self.canvas.k_labels
        text = f"“{labels[i]}”"
        lv = self.lv
        if (
            side == "query"
            and lv is not None
            and lv.block is not None
            and lv.block.stack == "decoder"
            and lv.q_pos is not None
        ):
            text = vm.row_story(lv.block.result, lv.block, int(lv.q_pos[i]))  # the token it reads → the word it chose
        self.info.setText(f"{side} {text}: {len(self.canvas.visible_links())} links")


def _positions(lv: vm.LinksView) -> list[int]:
    """The query rows' model positions (the rows' own indices where the view names none)."""
    return [int(p) for p in lv.q_pos] if lv.q_pos is not None else list(range(len(lv.q_labels)))
