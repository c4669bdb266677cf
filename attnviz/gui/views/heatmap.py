"""A token × token heatmap: one ImageItem, token tick labels, hover read-out, row/column highlight."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import (
    QBrush,
    QColor,
    QFont,
    QFontMetrics,
    QGuiApplication,
    QPainter,
    QPainterPath,
    QPen,
    QPicture,
    QTransform,
)
from PySide6.QtWidgets import QGraphicsRectItem, QLabel, QSizePolicy, QToolTip, QVBoxLayout, QWidget

from attnviz.core import view as vm
from attnviz.core.view import MapView
from attnviz.gui import style


class TokenAxis(pg.AxisItem):
    """Axis whose ticks are token labels at cell centres.

    When they cannot all fit, the view model's rule picks them (:func:`attnviz.core.view.tick_indices`):
    the first and the last, an even stride in between, and the hovered token. A bottom axis whose labels do
    not all fit side by side turns them upright (as the exported figure does), so a label needs only a line
    height of width: 26 source tokens over 600 px are all labelled instead of 7.
    """

    def __init__(self, orientation, **kw):
        super().__init__(orientation, **kw)
        self.labels: list[str] = []
        self.positions: np.ndarray | None = None  # each label's position in the map (what --query/--span count)
        self._thinned = False  # the labels last picked are fewer than the positions in view: they say positions
        self.focus: int | None = None
        self.enableAutoSIPrefix(False)
        self._fm = QFontMetrics(QFont())
        self._longest = 10
        self.rotated = False  # bottom labels drawn upright (reading upwards)
        self._step: float | None = None

    def set_labels(self, labels: list[str], positions=None) -> None:
        pos = None if positions is None else np.asarray(positions)
        held = self.positions
        same_pos = pos is None and held is None or (pos is not None and held is not None and np.array_equal(pos, held))
        if list(labels) == self.labels and same_pos:
            return  # same tokens: keep the cached axis picture
        self.labels = list(labels)
        self.positions = pos
        self._step = vm.frame_step(self.labels)  # seconds per frame where they are a clip's frames, else None
        self._longest = max((self._fm.horizontalAdvance(s) for s in self.labels), default=10)
        if self.orientation in ("top", "bottom"):
            # the first and last labels are centred on the edge cells: let them reach past the axis ends
            # (pyqtgraph hides labels that leave the axis rectangle)
            # (pyqtgraph measures a label level, an upright one too: a thinned label's position widens it)
            self.setStyle(hideOverlappingLabels=int((self._longest + self._position_px()) / 2 + 4))
        self.picture = None
        self.update()

    def set_focus(self, i: int | None) -> None:
        if i != self.focus:
            self.focus = i
            self.picture = None
            self.update()

    def band_width(self) -> float:
        """The width a left axis takes to draw every one of its labels (pyqtgraph's ``_updateWidth`` with the
        widest label measured, where pyqtgraph grows the band to the widest it has drawn so far)."""
        font = self.style["tickFont"] or QFont()
        widest = max((QFontMetrics(font).boundingRect(s).width() for s in self.labels), default=0)
        # thinned (or more than any screen labels), a label says its position too: " ·2047"
        if self._thinned or self._beyond_screen():
            widest += self._position_px(font)
        w = max(self.textWidth, widest + 2) + self.style["tickTextOffset"][0] + max(0, self.style["tickLength"])
        return w + (self.label.boundingRect().height() * 0.8 if self.label.isVisible() else 0)

    def _position_px(self, font: QFont | None = None) -> int:
        """Pixels a thinned label grows by for its position (" ·2047"); 0 without positions."""
        if self.positions is None or not len(self.positions):
            return 0
        fm = self._fm if font is None else QFontMetrics(font)
        return fm.horizontalAdvance(f"{vm.POSITION_MARK}{int(np.max(self.positions))}")

    def _beyond_screen(self) -> bool:
        return len(self.labels) * self._label_px() > screen_cells()

    def _label_px(self, upright: bool = False) -> float:
        if self.orientation in ("left", "right") or upright:
            return self._fm.height() + 1.0
        return self._longest + 8.0

    def shown(self, minVal: float, maxVal: float, size: float) -> list[int]:
        """Indices of the labels drawn for the visible range ``minVal..maxVal`` over ``size`` pixels."""
        n = len(self.labels)
        if minVal > maxVal:  # inverted view (queries run top to bottom)
            minVal, maxVal = maxVal, minVal
        if n == 0 or size <= 0 or maxVal <= minVal:
            return []
        lo = max(0, int(math.floor(minVal + 1e-9)))
        hi = min(n - 1, int(math.ceil(maxVal - 1e-9)) - 1)
        if hi < lo:
            return []
        visible = hi - lo + 1
        px = size * visible / (maxVal - minVal)
        fit = int(px / self._label_px())
        if self.orientation == "bottom":
            self.rotated = fit < visible  # side by side they would be thinned: stand them upright
            fit = int(px / self._label_px(self.rotated))
        if self._step is not None:  # a clip's frames: ticks at round times (0.5 s, 1 s...), not every 39th frame
            self._thinned = False  # (a time is where it sits)
            return vm.time_tick_indices(lo, hi, self._step, fit, self.focus)
        focus = self.focus - lo if self.focus is not None and lo <= self.focus <= hi else None
        picked = [lo + i for i in vm.tick_indices(visible, fit, focus)]
        self._thinned = len(picked) < visible
        return picked

    def fit_labels(self) -> None:
        """Draw the axis's picture now, as its paint would, sizing the axis for its labels at its present range and
        length.  pyqtgraph learns the room the labels need only while drawing them (``_updateMaxTextSize``): a long
        map's first paint stood the key labels upright and widened the query labels' band, the view shrank (8,192
        tokens: 833 -> 814 px high) and the map, pooled for the first size, was pooled again (bench/RESULTS.md,
        session 20 view20).  The picture is kept for the paint; a resize or a new range drops it (pyqtgraph's own
        rule), so it is drawn again only when the layout moved the axis.  Nothing to do while a picture stands."""
        if self.picture is not None:
            return
        picture = QPicture()
        painter = QPainter(picture)
        try:  # AxisItem.paint's steps
            if self.style["tickFont"]:
                painter.setFont(self.style["tickFont"])
            specs = self.generateDrawSpecs(painter)
            if specs is not None:
                self.drawPicture(painter, *specs)
        finally:
            painter.end()
        self.picture = picture  # type: ignore[assignment]  # (pyqtgraph sets it None in __init__; its paint stores one)

    def tickValues(self, minVal, maxVal, size):
        return [(1.0, [i + 0.5 for i in self.shown(minVal, maxVal, size)])]

    def tickStrings(self, values, scale, spacing):
        # (called with tickValues' ticks: a thinned pick's labels say their positions, vm.tick_texts)
        n = len(self.labels)
        shown = [int(v) for v in values if 0 <= int(v) < n]
        said = self.texts(shown, len(shown) + 1 if self._thinned else len(shown))
        if self._thinned and self.orientation in ("left", "right") and said:
            # pyqtgraph drops a label wider than the band and grows the band only to the labels it drew: a
            # position's digits ("a ·187" drawn, "sat ·1200" not) would wait for labels that never come
            font = self.style["tickFont"] or QFont()
            self._updateMaxTextSize(max(QFontMetrics(font).boundingRect(s).width() for s in said))
        texts = iter(said)
        return [next(texts) if 0 <= int(v) < n else "" for v in values]

    def texts(self, shown: list[int], among: int) -> list[str]:
        """The tick texts of labels ``shown`` where the axis holds ``among`` positions in view (a clip's frame
        times never: they say where they sit)."""
        return vm.tick_texts(self.labels, self.positions if self._step is None else None, shown, among)

    def generateDrawSpecs(self, p):
        axis_spec, tick_specs, text_specs = super().generateDrawSpecs(p)
        if not self.rotated or self.orientation != "bottom":
            return axis_spec, tick_specs, text_specs
        # upright labels: a line height wide, the text's length tall, hanging below the tick
        h = self._fm.height()
        upright = []
        for rect, flags, text in text_specs:
            w = self._fm.horizontalAdvance(text) + 2
            upright.append((QRectF(rect.center().x() - h / 2, rect.top(), h, w), flags, text))
        self._updateMaxTextSize(max((r.height() for r, _, _ in upright), default=0))  # the axis grows to fit
        return axis_spec, tick_specs, upright

    def drawPicture(self, p, axisSpec, tickSpecs, textSpecs):
        if not self.rotated or self.orientation != "bottom":
            super().drawPicture(p, axisSpec, tickSpecs, textSpecs)
            return
        super().drawPicture(p, axisSpec, tickSpecs, [])
        # each label as a rotated text path: QPicture (pyqtgraph caches the axis in one) replays painter
        # rotations unreliably, geometry it keeps as is
        font = self.style["tickFont"] or QFont()
        brush = QBrush(self.textPen().color())
        p.setRenderHint(QPainter.RenderHint.Antialiasing, True)  # glyph outlines (the axis line stays crisp)
        for rect, _flags, text in textSpecs:
            path = QPainterPath()
            path.addText(0.0, 0.0, font, text)
            t = QTransform()
            t.translate(rect.center().x() + (self._fm.ascent() - self._fm.descent()) / 2, rect.bottom() - 1)
            t.rotate(-90)  # reads upwards, its end at the tick
            t.translate(-path.boundingRect().left(), 0)  # the first glyph starts at the bottom edge
            p.fillPath(t.map(path), brush)


MIN_CELLS = 1024  # a map side drawn in fewer cells than this is never pooled (a screen reported tiny or absent)


def screen_cells() -> int:
    """At most how many cells a side the map is drawn in: the largest screen's longest side in device pixels (no
    widget shows more), at least :data:`MIN_CELLS`."""
    sides = [max(s.size().width(), s.size().height()) * s.devicePixelRatio() for s in QGuiApplication.screens()]
    return max(MIN_CELLS, math.ceil(max(sides, default=0)))


# how long the view's range and size must stay still before a long map's visible region is pooled again: a wheel
# turn or a drag sends dozens of range changes, each re-pool reads up to the whole map
REPOOL_DELAY_MS = 80

# rows a found token's view shows (HeatmapWidget.go_to): its neighbours each side, every label drawn
FIND_SPAN = 32


class HeatmapWidget(QWidget):
    """Draws a :class:`MapView`; rows are queries (top to bottom), columns keys.

    Signals
    -------
    hovered(int, int)   row and column under the cursor (-1, -1 when outside)
    clicked(int, int)   row and column clicked
    repooled()          a map longer than the screen was drawn again for the view's range and size
    stretched()         the colour scale's top was set again for the positions in view

    A zoomed-in map on the "map" or "shared" scale is coloured to the positions in view (:attr:`span_top`, set by
    the view that draws it): its top is theirs once the view settles, as the exported figure's (``figure --span``)
    is -- a long causal map's whole top is row 0's 1.0, and a window 1,000 positions on stayed black.

    A map longer than the screen (:func:`screen_cells`) is drawn max-pooled, and only the region around the view:
    after a zoom, pan or resize settles (:data:`REPOOL_DELAY_MS`) the view model plans the region and its runs for
    the view's pixels (:func:`attnviz.core.view.plan_region`: one position a pixel or more when they fit) and it is
    pooled from the full map again.  Axes, hover and boxes count positions throughout.
    """

    hovered = Signal(int, int)
    clicked = Signal(int, int)
    repooled = Signal()
    stretched = Signal()

    def __init__(self, parent=None, x_title: str = "key", y_title: str = "query"):
        super().__init__(parent)
        style.configure()
        self.mv: MapView | None = None
        self.shown: np.ndarray | None = None  # values as drawn (log or linear)
        self.cells: np.ndarray = np.zeros((0, 0), np.float32)  # what the colours are of (core.view.drawn_cells)
        self.log = False
        self._bar: tuple | None = None  # the colour bar's levels, log and words as last set
        self._titles = (x_title, y_title)
        self.full_title = ""  # the map's title whole (the one drawn is cut with '…' to the view: _show_title)
        self.x_axis = TokenAxis("bottom")
        self.y_axis = TokenAxis("left")
        self.plot = pg.PlotWidget(axisItems={"bottom": self.x_axis, "left": self.y_axis})
        self.plot.setMinimumSize(200, 200)
        pi = self.plot.getPlotItem()
        pi.invertY(True)
        pi.setLabel("bottom", x_title)
        pi.setLabel("left", y_title)
        pi.hideButtons()
        pi.setMenuEnabled(False)
        self.vb = pi.getViewBox()
        self.region: vm.MapRegion | None = None  # what a long map's image holds (None: the whole map, cell for cell)
        self._long = False  # the map is longer than the screen: drawn pooled, region by region
        self._levels: tuple[float, float] = (0.0, 1.0)
        self._repool_timer = QTimer(self)
        self._repool_timer.setSingleShot(True)
        self._repool_timer.setInterval(REPOOL_DELAY_MS)
        self._repool_timer.timeout.connect(self._repool)
        # the top of the scale over a window of positions ((rows, keys) -> top, core.view.span_top); None: the
        # whole map's top however zoomed (a view whose export does not draw the window: Alignment)
        self.span_top: Callable[[tuple[int, int], tuple[int, int]], float] | None = None
        self._spanned = False  # the top in force is the positions in view's (the colour bar says so)
        self._stretch_timer = QTimer(self)
        self._stretch_timer.setSingleShot(True)
        self._stretch_timer.setInterval(REPOOL_DELAY_MS)  # once the view settles, not on every step of a pan
        self._stretch_timer.timeout.connect(self.restretch)
        self.vb.sigRangeChanged.connect(self._range_moved)
        self.vb.sigResized.connect(self._range_moved)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.vb.addItem(self.image)
        self.colorbar = pg.ColorBarItem(values=(0, 1), colorMap=style.colormap(), interactive=False, width=14)
        self.colorbar.axis.enableAutoSIPrefix(False)
        self._diverging = False  # the colour bar holds the diverging map (an A − B map is drawn)
        self.colorbar.setImageItem(self.image, insert_in=pi)
        # the title spans the whole plot, the query axis's labels and the colour bar included, not the map's column
        # alone: at 1000 px the map is ~190 px wide and "decoder cross-attention · l…" was all it said
        pi.layout.removeItem(pi.titleLabel)
        pi.layout.addItem(pi.titleLabel, 0, 0, 1, pi.layout.columnCount())
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
        self.hover_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.hover_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        # a time series' values above its map (MapView.k_values), one point per key column, the columns linked
        self.series = pg.PlotWidget()
        self.series.setFixedHeight(110)
        spi = self.series.getPlotItem()
        spi.hideButtons()
        spi.setMenuEnabled(False)
        spi.setLabel("left", "value")
        spi.getAxis("left").enableAutoSIPrefix(False)  # the series' own numbers, as the figure prints them
        spi.getAxis("bottom").setStyle(showValues=False)
        spi.setXLink(pi)
        self.series_curve = spi.plot([], [], pen=pg.mkPen((40, 40, 40), width=1.5), symbol="o", symbolSize=4)
        self._series_pad = pg.GraphicsWidget()  # stands where the map's colour bar stands, so the columns line up
        spi.layout.addItem(self._series_pad, 2, 5)
        spi.layout.setColumnFixedWidth(4, 5)
        self.series.hide()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.series)
        lay.addWidget(self.plot, 1)
        lay.addWidget(self.hover_label)
        self.hover: tuple[int, int] = (-1, -1)
        self.plot.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self.plot.scene().sigMouseClicked.connect(self._on_mouse_clicked)

    # -- drawing ---------------------------------------------------------------
    def set_map(self, mv: MapView, log: bool = False, reset_view: bool = True) -> None:
        same_shape = self.mv is not None and self.mv.matrix.shape == mv.matrix.shape
        log = log and not mv.diverging  # a signed difference is never on a log scale
        self.mv, self.log = mv, log
        if mv.diverging != self._diverging:
            self._diverging = mv.diverging
            self.colorbar.setColorMap(style.diff_colormap() if mv.diverging else style.colormap())
        tq, tk = mv.matrix.shape
        if reset_view or not same_shape:
            self.vb.setRange(QRectF(0, 0, tk, tq), padding=0)
        self._stretch_timer.stop()
        self.cells = vm.drawn_cells(mv)  # the weights, or on the row scale each row over its maximum
        self._levels = self._wanted_levels()  # (after the range: a kept zoom keeps its window's top)
        self.x_axis.set_labels(mv.k_labels, mv.k_pos)
        self.y_axis.set_labels(mv.q_labels, mv.q_pos)
        pi = self.plot.getPlotItem()
        titles = (mv.x_title, mv.y_title)
        if titles != self._titles:  # an axis forgets its cached picture when its title is set, same or not
            pi.setLabel("bottom", mv.x_title)
            pi.setLabel("left", mv.y_title)
            self._titles = titles
        self.full_title = mv.title
        self._show_title()
        # again once the axes have taken their new labels' widths (the room beside the title is theirs)
        QTimer.singleShot(0, self._show_title)
        self._set_series(mv)
        # a map with more positions than the screen has pixels is drawn max-pooled (as the figure is): handed whole
        # to pyqtgraph, a crafted 30,000-token map was coloured into a 3.6 GB picture (8 GB held, 33 s to the
        # first paint) that Qt then sampled one cell in ~50 of, its peaks lost between the samples
        self._long = max(tq, tk) > screen_cells()
        self._repool_timer.stop()
        if self._long:
            # the colour bar's ticks (its axis's width) and the axes' labels set before the pool is planned: the
            # view's pixels with every band in place, else pooled twice
            self._set_bar(self._words())
            self._fit_axes(pi)
            self._draw_region(self._plan() or vm.MapRegion(0, tq, 0, tk, *(-(-n // screen_cells()) for n in (tq, tk))))
        else:
            self.region = None
            self._draw(self.cells, "", QRectF(0, 0, tk, tq))
        r, c = self.hover
        if 0 <= r < tq and 0 <= c < tk:
            self.set_hover(r, c)
        else:
            self.set_hover(-1, -1)

    def _show_title(self) -> None:
        """The title on one line, on two where the view is narrower (:func:`~attnviz.core.view.title_lines`), a line
        still too wide cut with '…' and the tooltip then the title whole.  pyqtgraph
        makes a title's width its column's minimum: a long one (a speech clip's "the clip: frames 0–115 of 200")
        widened the plot past a 1000-px window's view, the map cut at 1 s and the colour bar off screen."""
        pi = self.plot.getPlotItem()
        font = QFont()
        font.setPointSizeF(10.0)  # the size the title is drawn at
        # the title's row spans the plot: the view's width less the plot's margins
        left, _, right, _ = pi.layout.getContentsMargins()
        room = max(40, int(self.plot.viewport().width() - left - right - 8))
        metrics = QFontMetrics(font)
        lines = vm.title_lines(self.full_title, metrics.horizontalAdvance, room)  # two where one line is too wide
        cut = [metrics.elidedText(line, Qt.TextElideMode.ElideRight, room) for line in lines]
        shown = "<br>".join(cut)
        if pi.titleLabel.text != shown:
            pi.setTitle(shown, size="10pt")
            if len(cut) > 1:  # (pyqtgraph holds the title's row at 30 px: one line)
                height = math.ceil(pi.titleLabel.item.boundingRect().height()) + 2
                pi.titleLabel.setMaximumHeight(height)
                pi.layout.setRowFixedHeight(0, height)
            # the plot stays as wide as a longer title made it until the view is resized: fit it to the view again
            pi.setGeometry(QRectF(self.plot.range))
        pi.titleLabel.setToolTip(self.full_title if cut != lines else "")  # said whole unless a line was cut

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if self.full_title:
            self._show_title()

    def _fit_axes(self, pi) -> None:
        """Lay the plot out with the room its axes' labels take once drawn.  The query labels' band sets the key
        axis's length, which decides whether the key labels stand upright, whose band sets the query axis's length,
        which picks the query labels shown: drawn and laid out again until neither axis moves (twice on a new map;
        a head switch finds both pictures standing and only lays out)."""
        for _ in range(3):
            pi.layout.activate()
            if self.x_axis.picture is not None and self.y_axis.picture is not None:
                return
            self.y_axis.fit_labels()
            self.x_axis.fit_labels()
        pi.layout.activate()

    def _draw(self, cells: np.ndarray, note: str, rect: QRectF) -> None:
        """``cells`` (weights, pooled or not) coloured over ``rect`` (position coordinates); ``note`` says how many
        positions a cell holds, on the colour bar."""
        mv, (lo, hi) = self.mv, self._levels
        assert mv is not None
        self.shown = style.display_values(cells, self.log, (lo, hi))  # (log after max: log10 keeps the order)
        self.image.setImage(self.shown, autoLevels=False, levels=(lo, hi))
        self.image.setRect(rect)  # each cell over its runs of positions: axes, hover and boxes count positions
        self._set_bar(self._words() + note)

    def _set_bar(self, words: str) -> None:
        """The colour bar at the map's levels with ``words`` (the figure's)."""
        mv = self.mv
        assert mv is not None
        bar = (self._levels, self.log, words, mv.diverging)
        if bar != self._bar:  # setting it again would re-lay the colour bar's axis on every head switch
            style.set_colorbar(self.colorbar, *bar[:3])
            self._bar = bar

    def _draw_region(self, region: vm.MapRegion) -> None:
        assert self.mv is not None
        # only the region is read; at one position a cell it is a view, copied here at most the pixels' size
        cells = np.ascontiguousarray(vm.pool_region(self.cells, region, signed=self.mv.diverging))
        self.region = region
        self._draw(cells, region.note, QRectF(*region.rect))
        self.repooled.emit()

    def _pixels(self) -> tuple[float, float]:
        """The view's size in device pixels (never more than the screen's: no more can show); the screen's before
        the widget is laid out."""
        side = screen_cells()
        w, h = self.vb.width(), self.vb.height()
        if w < 2 or h < 2:
            return side, side
        ratio = self.plot.devicePixelRatioF()
        return min(w * ratio, side), min(h * ratio, side)

    def _plan(self, margin: float = vm.zoom.MARGIN) -> vm.MapRegion | None:
        assert self.mv is not None
        x_range, y_range = self.vb.viewRange()
        return vm.plan_region(self.mv.matrix.shape, x_range, y_range, self._pixels(), margin)

    def _range_moved(self, *_) -> None:
        if self._long:
            self._repool_timer.start()  # (re)started: pooled once the range stops moving
        if self.span_top is not None and self.mv is not None and vm.stretches(self.mv):
            self._stretch_timer.start()

    def _wanted_levels(self) -> tuple[float, float]:
        """The colour levels for the map and the view: the view model's top (the selection's scale), or on a
        stretched scale zoomed in, the top of the positions in view (``figure --span --key-span`` of them)."""
        mv = self.mv
        assert mv is not None
        if mv.diverging:  # A − B: diverging colours, symmetric about 0
            self._spanned = False
            return mv.vmin, mv.vmax
        span = self.visible_span() if self.span_top is not None and vm.stretches(mv) else None
        self._spanned = span is not None
        top = self.span_top(*span) if self.span_top is not None and span is not None else mv.vmax
        lo, hi = style.display_levels(np.array([0.0, top]), self.log)
        return lo, hi

    def _words(self) -> str:
        """The colour bar's words, the figure's: a top over the positions in view says so."""
        assert self.mv is not None
        return vm.map_label(replace(self.mv, spanned=self._spanned), self.log)

    def restretch(self) -> None:
        """The view settled: colour it to the positions in view (the whole map's top when all of it is)."""
        if self.mv is None:
            return
        levels = self._wanted_levels()
        if levels != self._levels or self._words() != (self._bar or (None,) * 3)[2]:
            self._levels = levels
            if self._long and self.region is not None:
                self._draw_region(self.region)
            else:
                tq, tk = self.mv.matrix.shape
                self._draw(self.cells, "", QRectF(0, 0, tk, tq))
        self.stretched.emit()

    def _repool(self) -> None:
        """The view settled: pool the region around it again unless what is drawn already shows it at its runs."""
        if not self._long or self.mv is None:
            return
        needed = self._plan(margin=0.0)
        if needed is None or (self.region is not None and self.region.holds(needed)):
            return  # beside the map, or inside the drawn margin at the same runs: nothing new to show
        region = self._plan()
        if region is not None:
            self._draw_region(region)

    def _set_series(self, mv: MapView) -> None:
        """The series above the map (the figure draws the same values, see figures.views)."""
        if mv.k_values is None:
            self.series.hide()
            self.series_curve.setData([], [])
            self.y_axis.setWidth(None)  # its own labels' width again
            return
        self.series_curve.setData(np.arange(len(mv.k_values)) + 0.5, np.asarray(mv.k_values, float))
        self.series_curve.setSymbol("o" if vm.series_dots(mv.k_values) else None)
        self.series.getPlotItem().setLabel("left", mv.k_values_title)
        self.series.show()
        pi = self.plot.getPlotItem()
        pi.layout.activate()
        spi = self.series.getPlotItem()
        # the query labels' own width, every label measured (not the width drawn so far: fixed at a narrower map's,
        # the wider labels, a CTC letter's "0.96 s A" among "0.94 s", were left out and the rows read irregularly)
        width = max(self.y_axis.band_width(), spi.getAxis("left").width())
        self.y_axis.setWidth(width)
        spi.getAxis("left").setWidth(width)
        self._series_pad.setFixedWidth(self.colorbar.boundingRect().width())
        pi.layout.activate()  # the map's band at that width now, before the labels are picked for its length

    def mark_row(self, row: int | None) -> None:
        if self.mv is None or row is None or row < 0 or row >= self.mv.matrix.shape[0]:
            self.mark_box.hide()
            return
        self.mark_box.setRect(QRectF(0, row, self.mv.matrix.shape[1], 1))
        self.mark_box.show()

    def go_to(self, row: int) -> None:
        """Show query row ``row`` (a found token): a map longer than :data:`FIND_SPAN` rows zooms to that many
        around it (a self-attention map's keys alike, another map's keys as they are), and the row is highlighted
        with its strongest key in view and read out as a hover would.  (Its strongest of all keys named a key
        outside the view: a causal map's row 2,000 zoomed to keys 1,984..2,015 read out its sink, key 0.)"""
        mv = self.mv
        if mv is None or not 0 <= row < mv.matrix.shape[0]:
            return
        tq, tk = mv.matrix.shape
        (x0, x1), _ = self.vb.viewRange()
        if tq > FIND_SPAN:
            r0 = max(0, min(row - FIND_SPAN // 2, tq - FIND_SPAN))
            if mv.block is not None and mv.block.kind == "self" and tq == tk:
                x0, x1 = r0, r0 + FIND_SPAN
            self.vb.setRange(QRectF(x0, r0, x1 - x0, FIND_SPAN), padding=0)
        lo, hi = _cells_in(x0, x1, tk)
        if hi <= lo:  # the view lies beside the map's keys: its strongest of all
            lo, hi = 0, tk
        weights = np.nan_to_num(np.asarray(mv.matrix[row, lo:hi], np.float64), nan=-np.inf)
        self.set_hover(row, lo + int(np.argmax(weights)) if hi > lo else 0)

    def visible_span(self) -> tuple[tuple[int, int], tuple[int, int]] | None:
        """The positions a zoomed-in view shows, ``((first row, last row), (first key, last key))`` as the model
        counts them (``figure --span`` / ``--key-span``); None when the whole map is in view."""
        mv = self.mv
        if mv is None:
            return None
        tq, tk = mv.matrix.shape
        (x0, x1), (y0, y1) = self.vb.viewRange()
        (r0, r1), (k0, k1) = _cells_in(y0, y1, tq), _cells_in(x0, x1, tk)
        if (r0, r1, k0, k1) == (0, tq, 0, tk) or r1 <= r0 or k1 <= k0:
            return None
        return (int(mv.q_pos[r0]), int(mv.q_pos[r1 - 1])), (int(mv.k_pos[k0]), int(mv.k_pos[k1 - 1]))

    # -- hover -------------------------------------------------------------------
    def describe(self, row: int, col: int) -> str:
        mv = self.mv
        if mv is None:  # nothing drawn yet: no cell to describe
            return ""
        w = mv.value(row, col)
        q = f"{mv.y_title} “{mv.q_labels[row]}” ({int(mv.q_pos[row])})"
        if mv.block is not None and mv.block.stack == "decoder":  # a decoder row reads one token and chose the next
            q = f"{mv.y_title} row {int(mv.q_pos[row])}: {vm.row_story(mv.block.result, mv.block, int(mv.q_pos[row]))}"
        return f"{q} → {mv.x_title} “{mv.k_labels[col]}” ({int(mv.k_pos[col])}): {w:.4f}"

    def set_hover(self, row: int, col: int) -> None:
        mv = self.mv
        if mv is None or not (0 <= row < mv.matrix.shape[0] and 0 <= col < mv.matrix.shape[1]):
            self.hover = (-1, -1)
            self.x_axis.set_focus(None)
            self.y_axis.set_focus(None)
            self.row_box.hide()
            self.col_box.hide()
            self.hover_label.setText(" ")
            return
        self.hover = (row, col)
        self.x_axis.set_focus(col)
        self.y_axis.set_focus(row)
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


def _cells_in(a: float, b: float, n: int) -> tuple[int, int]:
    """The cells ``lo..hi-1`` of ``n`` any part of which lies between view coordinates ``a`` and ``b`` (a hair
    in from each edge: a view set to whole cells shows those, not its neighbours)."""
    return max(0, math.floor(a + 1e-6)), min(n, math.ceil(b - 1e-6))
