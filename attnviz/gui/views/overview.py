"""Model overview: every layer × head as a thumbnail, one shared colour scale, one ViewBox.

All thumbnails are ImageItems placed on a grid inside a single ViewBox (72 PlotItems would be
slow and trip a PySide6 6.12 bug).  Long inputs are max-pooled to at most THUMB pixels a side.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPoint, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFontMetricsF, QPen
from PySide6.QtWidgets import QGraphicsItem, QGraphicsLineItem, QGraphicsRectItem, QVBoxLayout

from attnviz.core import view as vm
from attnviz.core.view_names import tab_title
from attnviz.core.words import count
from attnviz.gui import style
from attnviz.gui.views.base import View, info_label
from attnviz.gui.views.block_bars import BAR_GAP, BlockBar, clear_bars, draw_bar, right_room
from attnviz.gui.views.frames_key import FramesKeyBar

THUMB = vm.THUMB  # max thumbnail side in cells (the figure pools to the same size)
GAP = 0.12  # gap between thumbnails, in cell units
BLOCK_GAP = 0.9  # least rows of space above a block (grown to fit its title and head labels)
TITLE_PX = 46.0  # pixels needed above a block: head labels plus the block title
HEAD_LABEL_PX = 20.0  # the head labels' height; the title sits above them
LAYER_LABEL_PX = 34.0  # room left of the grid for the layer labels ("L11")
FOCUS = (255, 40, 40)  # the focus frame: what the other views draw
FOCUS_COMPARING = (30, 120, 255)  # ... while a comparison's red divergence frames are shown


def _label_room(blocks) -> float:
    """How many times :data:`LAYER_LABEL_PX` the longest layer label needs ("L0 full" is twice "L0")."""
    longest = max((len(t) for b in blocks for t in vm.layer_labels(b)), default=3)
    return max(1.0, longest / 3.5)


class OverviewView(View):
    """Signals: ``picked(block, layer, head)`` when a thumbnail is clicked; ``context_requested(block, layer,
    head, global position)`` when one is right-clicked (its menu switches the head off)."""

    title = tab_title("overview")
    picked = Signal(int, int, int)
    context_requested = Signal(int, int, int, QPoint)

    def __init__(self, session, parent=None):
        super().__init__(session, parent)
        self.thumbs: dict[tuple[int, int, int], pg.ImageItem] = {}
        self.cells: dict[tuple[int, int, int], QRectF] = {}
        self._labels: list = []
        self._titles: list = []  # (block title, its top row, its text whole)
        self.levels = (0.0, 1.0)
        self.vmax = 1.0
        self.scale = vm.OverviewScale(1.0, vm.overview_label(False, "fixed"), "fixed scale 0–1")  # (as drawn last)
        self.block_levels: dict[int, tuple[float, float]] = {}  # block -> its thumbnails' colour range, as drawn
        self.block_bars: dict[int, BlockBar] = {}  # a scale per block: each block's small bar beside its grid
        self._block_rows: list[tuple[int, float, int]] = []  # (block, its first row, its layers)
        self._drawn_key = None
        # File ▸ Compare with…: a frame around each head, coloured by its divergence from model B
        self.frames: dict[tuple[int, int, int], QGraphicsRectItem] = {}
        self.frame_colours: dict[tuple[int, int, int], str] = {}
        self._frames_for: tuple[int, int] | None = None  # (comparison, result) the frames were drawn for
        session.comparison_changed.connect(self._on_selection)
        # right-click ▸ Switch head off: a cross over each head that is off
        self.crosses: dict[tuple[int, int, int], list[QGraphicsItem]] = {}
        self._crosses_for: tuple | None = None
        session.ablation_changed.connect(self._on_selection)

    def build(self) -> None:
        style.configure()
        self.glw = pg.GraphicsLayoutWidget()
        self.vb = self.glw.addViewBox(row=0, col=0, lockAspect=True, invertY=True, enableMenu=False)
        self.colorbar = pg.ColorBarItem(values=(0, 1), colorMap=style.colormap(), interactive=False, width=14)
        self.colorbar.axis.enableAutoSIPrefix(False)
        self.glw.addItem(self.colorbar, row=0, col=1)
        self.info = info_label()
        lay = QVBoxLayout(self.body)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addWidget(self.info)
        lay.addWidget(self.glw, 1)
        self.frames_key = FramesKeyBar()  # what the comparison's frames mean, on which scale (hidden otherwise)
        lay.addWidget(self.frames_key)
        self.focus_box = QGraphicsRectItem()
        self._focus_pen(comparing=False)
        self.focus_box.setZValue(20)
        self.vb.addItem(self.focus_box, ignoreBounds=True)
        self.glw.scene().sigMouseClicked.connect(self._on_click)
        self.vb.sigRangeChanged.connect(self._place_titles)
        self.vb.sigResized.connect(self._place_titles)

    # -- structure ---------------------------------------------------------------
    def on_result(self) -> None:
        for it in list(self.thumbs.values()) + self._labels:
            self.vb.removeItem(it)
        self.thumbs.clear()
        self.cells.clear()
        self._labels = []
        blocks = self.session.blocks
        gap, cell_px = self._block_gap(blocks)
        self._titles = []
        clear_bars(self.vb, self.block_bars)
        self._block_rows = []
        y = 0.0
        for bi, blk in enumerate(blocks):
            note = vm.windows_note(blk)  # layers within windows and layers over the whole image (Qwen2.5-VL)
            full = f"{blk.name}  ({count(blk.n_layers, 'layer')} × {count(blk.n_heads, 'head')})" + (
                f"  ·  {note}" if note else ""
            )
            title = pg.TextItem(full, color="k", anchor=(0, 1))
            self.vb.addItem(title)
            self._labels.append(title)
            y += gap
            self._titles.append((title, y, full))
            self._block_rows.append((bi, y, blk.n_layers))
            for layer, text in enumerate(vm.layer_labels(blk)):
                lab = pg.TextItem(text, color="#444", anchor=(1, 0.5))
                lab.setPos(-0.05, y + layer + 0.5)
                self.vb.addItem(lab)
                self._labels.append(lab)
                for h in range(blk.heads_in(layer)):
                    img = pg.ImageItem(axisOrder="row-major")
                    rect = QRectF(h, y + layer, 1 - GAP, 1 - GAP)
                    img.setRect(rect)
                    self.vb.addItem(img)
                    self.thumbs[(bi, layer, h)] = img
                    self.cells[(bi, layer, h)] = rect
            for h in range(blk.n_heads):
                lab = pg.TextItem(f"H{h}", color="#444", anchor=(0.5, 1))
                lab.setPos(h + 0.45, y)
                self.vb.addItem(lab)
                self._labels.append(lab)
            y += blk.n_layers + 0.3
        self.colorbar.setImageItem(list(self.thumbs.values()))
        width = max((b.n_heads for b in self.session.blocks), default=1)
        # the layer labels need pixels, not cells: a fixed 0.8 cell left a small model's grid a fifth narrower
        room = _label_room(blocks)
        margin = min(0.8 * room, room * LAYER_LABEL_PX / max(cell_px, 1.0))
        # a kind with a scale per block (speech): room right of the grid for each block's bar and its ticks
        bars = right_room(cell_px) if vm.has_kind_scale(self.session.result, blocks) else 0.0
        self.vb.setRange(QRectF(-margin, 0, width + margin + bars, y), padding=0.02)
        self._place_titles()
        self._drawn_key = None
        self._frames_for = None
        self._crosses_for = None

    def _block_gap(self, blocks) -> tuple[float, float]:
        """Rows of space above each block for its title and head labels (text has a fixed pixel size), and the
        cell's size in pixels that this gives."""
        vw = max(200, self.glw.width() - 80)
        vh = max(200, self.glw.height())
        heads = max((b.n_heads for b in blocks), default=1)
        layers = sum(b.n_layers + 0.3 for b in blocks)
        gap = BLOCK_GAP
        cell_px = 1.0
        label_px = LAYER_LABEL_PX * _label_room(blocks)
        for _ in range(4):  # the cell size depends on the gap and the gap on the cell size
            cell_px = min(vh / max(1.0, layers + len(blocks) * gap), (vw - label_px) / max(heads, 1))
            gap = min(3.0, max(BLOCK_GAP, TITLE_PX / max(cell_px, 1.0)))
        return gap, cell_px

    def _place_titles(self, *_) -> None:
        """Keep each block title just above its head labels, whatever the zoom, and within the view: a title
        starts over the grid's left edge, further left (over the layer labels, to the view's edge) where it needs
        the room, and one wider than the whole view is cut with "…" and says itself whole in its tooltip (at
        1000 px "encoder self-attention  (3 layers × 4 heads)" ran under the colour bar, cut mid-word)."""
        if not self._titles:
            return
        ph = abs(self.vb.viewPixelSize()[1]) or 0.02
        box = self.vb.sceneBoundingRect()
        grid_left = self.vb.mapViewToScene(pg.Point(0, 0)).x()
        for title, y_top, full in self._titles:
            margin = 2 * title.textItem.document().documentMargin()
            metrics = QFontMetricsF(title.textItem.font())  # (fractional: an int advance cut a title that fit)
            need = metrics.horizontalAdvance(full) + margin
            left = max(box.left(), min(grid_left, box.right() - need))
            title.setPos(self.vb.mapSceneToView(QPointF(left, 0)).x(), y_top - HEAD_LABEL_PX * ph)
            room = max(0.0, box.right() - left - margin)
            shown = metrics.elidedText(full, Qt.TextElideMode.ElideRight, room + 0.01)
            if title.textItem.toPlainText() != shown:
                title.setText(shown)
            tip = full if shown != full else ""
            title.setToolTip(tip)
            title.textItem.setToolTip(tip)  # (the text is the item under the pointer)

    # -- drawing -------------------------------------------------------------------
    def thumbnail_maps(self, use_cache: bool = True) -> dict[tuple[int, int, int], np.ndarray]:
        """Max-pooled maps of every head after the step / special-token / kept-mass filters.

        The view model keeps them with the result, per filter setting (the analyze worker pooled the first
        setting already); ``use_cache=False`` pools them again."""
        s = self.session
        sel = vm.Selection(
            step=s.sel.step, hide_special=s.sel.hide_special, keep=s.sel.keep, batch=s.sel.batch, padding=s.sel.padding
        )
        return vm.thumbnails(s.result, sel, THUMB, s.blocks, use_cache=use_cache)

    def redraw(self, use_cache: bool = True) -> None:
        """Redraw every thumbnail on one shared scale (``use_cache=False`` also recomputes the pooling)."""
        maps = self.thumbnail_maps(use_cache)
        s = self.session
        log = s.sel.log
        # one scale over every block: 0–1, their largest weight or by hand; or a speech model's per block
        self.scale = vm.overview_colours(s.result, s.blocks, maps, s.sel.scale, log, s.sel.vmax, s.sel.kind_scale)
        vmax = self.scale.top
        self.vmax = vmax
        self.levels = style.display_levels(np.array([0.0, vmax]), log)
        self.block_levels = {
            bi: style.display_levels(np.array([0.0, self.scale.top_of(bi)]), log) for bi, _, _ in self._block_rows
        }
        if not self.scale.per_block:  # (the one bar sets every thumbnail's levels: first, so the images' own win)
            style.set_colorbar(self.colorbar, self.levels, log, self.scale.label)
        for key, img in self.thumbs.items():
            m = maps.get(key)
            if m is None:
                continue
            levels = self.block_levels.get(key[0], self.levels)
            img.setImage(style.display_values(m, log, levels), autoLevels=False, levels=levels)
            # (again: the one bar's setImageItem left levels deferred to an image-less item, 0–1, which the first
            # setImage applies after its own)
            img.setLevels(levels)
            img.setRect(self.cells[key])  # setImage keeps the old pixel scale; re-fit the cell
        self.colorbar.setVisible(not self.scale.per_block)
        self.colorbar.setToolTip(f"{self.scale.label}: {self.scale.note}")
        self._draw_block_bars(log)

    def _draw_block_bars(self, log: bool) -> None:
        """A scale per block: a small bar beside each block's grid, its ticks its block's top (the one colour bar
        is hidden: it could say one top only)."""
        clear_bars(self.vb, self.block_bars)
        if not self.scale.per_block:
            return
        x = max((b.n_heads for b in self.session.blocks), default=1) - GAP + BAR_GAP
        for bi, y, layers in self._block_rows:
            name = self.session.blocks[bi].name
            top = self.scale.top_of(bi)
            words = f"{name}: {self.scale.label}, 0–{top:.3g}"
            self.block_bars[bi] = draw_bar(self.vb, x, y, layers - GAP, top, log, words)

    def draw(self) -> None:
        s = self.session
        key = (
            id(s.result),
            s.sel.step,
            s.sel.log,
            s.sel.hide_special,
            s.sel.keep,
            s.sel.batch,
            s.sel.scale,
            s.sel.vmax,
            s.sel.padding,
            s.sel.kind_scale,
        )
        if key != self._drawn_key:
            self.redraw()
            self._drawn_key = key
        self.draw_frames()
        self.draw_crosses()
        self.update_focus()

    def _focus_pen(self, comparing: bool) -> None:
        # red frames the focus; while comparing, red is the divergence frames' colour ("darkest red = most"), so the
        # focus turns blue: a red focus around layer 5 read as "layer 5 diverges most"
        pen = QPen(QColor(*(FOCUS_COMPARING if comparing else FOCUS)))
        pen.setCosmetic(True)
        pen.setWidthF(2.5)
        self.focus_box.setPen(pen)

    def draw_frames(self) -> None:
        """Frame each head the held comparison measured, darker red the more it diverges from model B."""
        c = self.session.comparison
        key = (id(c), id(self.session.result))
        if key == self._frames_for:
            return
        self._frames_for = key
        self._focus_pen(comparing=c is not None and c.result_a is self.session.result)
        for item in self.frames.values():
            self.vb.removeItem(item)
        self.frames.clear()
        self.frame_colours.clear()
        self.frames_key.clear()
        if c is None or c.result_a is not self.session.result:
            return
        js = c.divergence(self.session.blocks)
        if any(v > 0 for v in js.values()):  # no frame, no key (a model against itself)
            self.frames_key.show_key(c.frames_key(self.session.blocks))
        for key, colour in c.frame_colours(self.session.blocks).items():
            if key not in self.cells:
                continue
            value = js[key]
            pen = QPen(QColor(colour))
            pen.setCosmetic(True)
            pen.setWidthF(2.0)
            item = QGraphicsRectItem(self.cells[key].adjusted(-0.02, -0.02, 0.02, 0.02))
            item.setPen(pen)
            item.setZValue(15)
            item.setToolTip(f"JS vs {c.name_b}: {value:.4g} bits")
            self.vb.addItem(item, ignoreBounds=True)
            self.frames[key] = item
            self.frame_colours[key] = colour

    def draw_crosses(self) -> None:
        """Cross out each head that is switched off (right-click ▸ Switch head off)."""
        s = self.session
        key = (s.ablation.off, id(s.result))
        if key == self._crosses_for:
            return
        self._crosses_for = key
        for drawn in self.crosses.values():
            for old in drawn:
                self.vb.removeItem(old)
        self.crosses.clear()
        pen = QPen(QColor(vm.OFF_CROSS))  # the exported figure's colours (the view model's palette)
        pen.setCosmetic(True)
        pen.setWidthF(2.5)
        for cell in sorted(s.ablation.cells(s.blocks)):
            r = self.cells.get(cell)
            if r is None:
                continue
            veil = QGraphicsRectItem(r)  # the head's map greyed under the cross: it no longer reaches the output
            veil.setPen(QPen(Qt.PenStyle.NoPen))
            veil.setBrush(QColor(*vm.OFF_VEIL))
            items: list[QGraphicsItem] = [
                veil,
                QGraphicsLineItem(r.left(), r.top(), r.right(), r.bottom()),
                QGraphicsLineItem(r.left(), r.bottom(), r.right(), r.top()),
            ]
            for item in items:
                if isinstance(item, QGraphicsLineItem):
                    item.setPen(pen)
                item.setZValue(18)
                item.setToolTip("switched off (right-click to switch it back on)")
                self.vb.addItem(item, ignoreBounds=True)
            self.crosses[cell] = items

    def update_focus(self) -> None:
        """Frame what the other views draw: one head, or every head of an aggregate's layer range."""
        s = self.session.sel
        blk = self.session.block
        keys = [(s.block, layer, h) for layer, h in vm.focus_heads(blk, s)] if blk else []
        if not keys or any(k not in self.cells for k in keys):
            self.focus_box.hide()
            return
        rect = self.cells[keys[0]]
        for k in keys[1:]:
            rect = rect.united(self.cells[k])
        pad = 0.04
        self.focus_box.setRect(rect.adjusted(-pad, -pad, pad, pad))
        self.focus_box.show()
        self.info.setText(
            f"{len(self.thumbs)} heads · {self.scale.note} · focus: {blk.name} · {vm.head_what(blk, s)}"
            "  (click a thumbnail; ←/→ heads, ↑/↓ layers)"
            + (f" · {clip}" if (clip := vm.clip_note(self.session.result, self.session.blocks, s)) else "")
            + (f" · {self.session.comparison.frames_note()}" if self.session.comparison is not None else "")
            + (f" · {vm.OFF_NOTE} ({len(self.crosses)})" if self.crosses else "")
            + " · right-click a head to switch it off"
        )

    # -- picking -------------------------------------------------------------------
    def key_at_view(self, x: float, y: float):
        for key, r in self.cells.items():
            if r.contains(x, y):
                return key
        return None

    def _on_click(self, ev) -> None:
        if not self.vb.sceneBoundingRect().contains(ev.scenePos()):
            return
        p = self.vb.mapSceneToView(ev.scenePos())
        key = self.key_at_view(p.x(), p.y())
        if key is None:
            return
        if ev.button() == Qt.MouseButton.RightButton:
            self.context_requested.emit(*key, ev.screenPos().toPoint())
        else:
            self.picked.emit(*key)

    def widget_pos_of(self, block: int, layer: int, head: int):
        r = self.cells[(block, layer, head)]
        return self.glw.mapFromScene(self.vb.mapViewToScene(r.center()))
