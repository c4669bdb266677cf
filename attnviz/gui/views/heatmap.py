"""A token × token heatmap: one ImageItem, token tick labels, hover read-out, row/column highlight."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPen
from PySide6.QtWidgets import QGraphicsRectItem, QLabel, QSizePolicy, QToolTip, QVBoxLayout, QWidget

from attnviz.gui import style
from attnviz.gui.selection import MapView


class TokenAxis(pg.AxisItem):
    """Axis whose ticks are token labels at cell centres, thinned so labels never overlap.

    ``share`` splits the labels of one axis between two AxisItems (bottom + top): when they do
    not all fit on one side, alternate labels go to the other, doubling the room.
    ``share`` is None (one axis), "even" (the main axis) or "odd" (its partner).
    """

    def __init__(self, orientation, share: str | None = None, **kw):
        super().__init__(orientation, **kw)
        self.labels: list[str] = []
        self.share = share
        self.enableAutoSIPrefix(False)
        self._fm = QFontMetrics(QFont())

    def set_labels(self, labels: list[str]) -> None:
        if list(labels) == self.labels:
            return  # same tokens: keep the cached axis picture
        self.labels = list(labels)
        self._longest = max((self._fm.horizontalAdvance(self._short(s)) for s in self.labels), default=10)
        self.picture = None
        self.update()

    @staticmethod
    def _short(s: str) -> str:
        return s if len(s) <= 14 else s[:13] + "…"

    def _label_px(self) -> float:
        if self.orientation in ("left", "right"):
            return self._fm.height() + 1.0
        return getattr(self, "_longest", 40) + 10.0

    def tickValues(self, minVal, maxVal, size):
        n = len(self.labels)
        if minVal > maxVal:  # inverted view (queries run top to bottom)
            minVal, maxVal = maxVal, minVal
        if n == 0 or size <= 0 or maxVal <= minVal:
            return []
        lo = max(0, int(math.floor(minVal)))
        hi = min(n - 1, int(math.ceil(maxVal)))
        if hi < lo:
            return []
        if self.orientation in ("left", "right"):
            visible = hi - lo + 1
            fit = max(1, int(size / self._label_px()))
            step = max(1, math.ceil(visible / fit))
            start = (lo + step - 1) // step * step
            return [(float(step), [i + 0.5 for i in range(start, hi + 1, step)])]
        lane = {None: 0, "even": 0, "odd": 1}[self.share]
        lanes = 1 if self.share is None else 2
        vals = [i + 0.5 for i in self._lanes(lo, hi, minVal, maxVal, size, lanes)[lane]]
        return [(1.0, vals)]

    def _lanes(self, lo, hi, vmin, vmax, size, lanes):
        """Greedy placement by real text width: each label goes to the first lane (bottom, then top)
        where it does not touch its neighbour; the ones that fit nowhere are skipped."""
        px = size / (vmax - vmin)
        right = [-1e9] * lanes
        out = [[] for _ in range(lanes)]
        for i in range(lo, hi + 1):
            x = (i + 0.5 - vmin) * px
            half = self._fm.horizontalAdvance(self._short(self.labels[i])) / 2 + 3
            for k in range(lanes):
                if x - half >= right[k]:
                    out[k].append(i)
                    right[k] = x + half
                    break
        return out

    def tickStrings(self, values, scale, spacing):
        out = []
        for v in values:
            i = int(v)
            out.append(self._short(self.labels[i]) if 0 <= i < len(self.labels) else "")
        return out


class HeatmapWidget(QWidget):
    """Draws a :class:`MapView`; rows are queries (top to bottom), columns keys.

    Signals
    -------
    hovered(int, int)   row and column under the cursor (-1, -1 when outside)
    clicked(int, int)   row and column clicked
    """

    hovered = Signal(int, int)
    clicked = Signal(int, int)

    def __init__(self, parent=None, x_title: str = "key", y_title: str = "query"):
        super().__init__(parent)
        style.configure()
        self.mv: MapView | None = None
        self.shown: np.ndarray | None = None  # values as drawn (log or linear)
        self.log = False
        self.x_axis = TokenAxis("bottom", share="even")
        self.x_axis_top = TokenAxis("top", share="odd")  # the key labels that do not fit below
        self.y_axis = TokenAxis("left")
        self.plot = pg.PlotWidget(axisItems={"bottom": self.x_axis, "left": self.y_axis, "top": self.x_axis_top})
        self.plot.setMinimumSize(200, 200)
        pi = self.plot.getPlotItem()
        pi.invertY(True)
        pi.showAxis("top")
        pi.setLabel("bottom", x_title)
        pi.setLabel("left", y_title)
        pi.hideButtons()
        pi.setMenuEnabled(False)
        self.vb = pi.getViewBox()
        self.image = pg.ImageItem(axisOrder="row-major")
        self.vb.addItem(self.image)
        self.colorbar = pg.ColorBarItem(values=(0, 1), colorMap=style.colormap(), interactive=False, width=14)
        self.colorbar.axis.enableAutoSIPrefix(False)
        self.colorbar.setImageItem(self.image, insert_in=pi)
        pen = QPen(QColor(255, 255, 255, 230))
        pen.setCosmetic(True)
        pen.setWidthF(1.6)
        self.row_box = QGraphicsRectItem()
        self.col_box = QGraphicsRectItem()
        self.mark_box = QGraphicsRectItem()  # a fixed highlighted row (e.g. the current step)
        for box in (self.row_box, self.col_box):
            box.setPen(pen)
            box.setZValue(10)
            box.hide()
            self.vb.addItem(box, ignoreBounds=True)
        mpen = QPen(QColor(255, 64, 64))
        mpen.setCosmetic(True)
        mpen.setWidthF(2.2)
        self.mark_box.setPen(mpen)
        self.mark_box.setZValue(11)
        self.mark_box.hide()
        self.vb.addItem(self.mark_box, ignoreBounds=True)
        self.hover_label = QLabel(" ")
        self.hover_label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.hover_label.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.plot, 1)
        lay.addWidget(self.hover_label)
        self.hover: tuple[int, int] = (-1, -1)
        self.plot.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self.plot.scene().sigMouseClicked.connect(self._on_mouse_clicked)

    # -- drawing ---------------------------------------------------------------
    def set_map(self, mv: MapView, log: bool = False, reset_view: bool = True) -> None:
        same_shape = self.mv is not None and self.mv.matrix.shape == mv.matrix.shape
        self.mv, self.log = mv, log
        self.shown = style.display_values(mv.matrix, log)
        lo, hi = style.display_levels(mv.matrix, log)
        self.image.setImage(self.shown, autoLevels=False, levels=(lo, hi))
        tq, tk = mv.matrix.shape
        self.image.setRect(QRectF(0, 0, tk, tq))
        self.colorbar.setLevels((lo, hi))
        self.colorbar.axis.setLabel("log₁₀ weight" if log else "weight")
        self.x_axis.set_labels(mv.k_labels)
        self.x_axis_top.set_labels(mv.k_labels)
        self.y_axis.set_labels(mv.q_labels)
        self.plot.getPlotItem().setTitle(mv.title, size="10pt")
        if reset_view or not same_shape:
            self.vb.setRange(QRectF(0, 0, tk, tq), padding=0)
        r, c = self.hover
        if 0 <= r < tq and 0 <= c < tk:
            self.set_hover(r, c)
        else:
            self.set_hover(-1, -1)

    def mark_row(self, row: int | None) -> None:
        if self.mv is None or row is None or row < 0 or row >= self.mv.matrix.shape[0]:
            self.mark_box.hide()
            return
        self.mark_box.setRect(QRectF(0, row, self.mv.matrix.shape[1], 1))
        self.mark_box.show()

    # -- hover -------------------------------------------------------------------
    def describe(self, row: int, col: int) -> str:
        mv = self.mv
        w = mv.value(row, col)
        return f"query “{mv.q_labels[row]}” ({int(mv.q_pos[row])}) → key “{mv.k_labels[col]}” ({int(mv.k_pos[col])}): {w:.4f}"

    def set_hover(self, row: int, col: int) -> None:
        mv = self.mv
        if mv is None or not (0 <= row < mv.matrix.shape[0] and 0 <= col < mv.matrix.shape[1]):
            self.hover = (-1, -1)
            self.row_box.hide()
            self.col_box.hide()
            self.hover_label.setText(" ")
            return
        self.hover = (row, col)
        tq, tk = mv.matrix.shape
        self.row_box.setRect(QRectF(0, row, tk, 1))
        self.col_box.setRect(QRectF(col, 0, 1, tq))
        self.row_box.show()
        self.col_box.show()
        self.hover_label.setText(self.describe(row, col))

    def cell_at_scene(self, pos: QPointF) -> tuple[int, int]:
        if self.mv is None or not self.vb.sceneBoundingRect().contains(pos):
            return -1, -1
        p = self.vb.mapSceneToView(pos)
        row, col = int(math.floor(p.y())), int(math.floor(p.x()))
        tq, tk = self.mv.matrix.shape
        if 0 <= row < tq and 0 <= col < tk:
            return row, col
        return -1, -1

    def scene_pos_of(self, row: int, col: int) -> QPointF:
        """Scene position of a cell centre (for tests and keyboard focus)."""
        return self.vb.mapViewToScene(QPointF(col + 0.5, row + 0.5))

    def widget_pos_of(self, row: int, col: int):
        return self.plot.mapFromScene(self.scene_pos_of(row, col))

    def _on_mouse_moved(self, pos) -> None:
        row, col = self.cell_at_scene(pos)
        if (row, col) == self.hover:
            return
        self.set_hover(row, col)
        self.hovered.emit(row, col)
        if row >= 0:
            gp = self.plot.mapToGlobal(self.plot.mapFromScene(pos))
            QToolTip.showText(gp, self.describe(row, col), self.plot)
        else:
            QToolTip.hideText()

    def _on_mouse_clicked(self, ev) -> None:
        row, col = self.cell_at_scene(ev.scenePos())
        if row >= 0:
            self.clicked.emit(row, col)
