"""Image regions: the image with a chosen query's attention as a smoothed heat overlay.

Queries are the generated caption words (cross-attention over image patches) or, for a
vision encoder, CLS / the mean over patch queries (self-attention, rollout allowed) / a patch clicked on the
image ("where does this patch look?"); a vision–language decoder's words over its image tokens, a tiled image's
global image (Idefics3 / SmolVLM) in a second picture beside the tiles, on the same colour scale.  A strip
below shows one thumbnail per generated word ("Show, Attend and Tell").  What lies under the heat
(grey image, colour image, heat only) is the selection's ``image_base``, so the export draws it too.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QIcon, QImage, QPixmap
from PySide6.QtWidgets import (
    QComboBox,
    QGraphicsRectItem,
    QHBoxLayout,
    QScrollArea,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from attnviz.app import rules
from attnviz.core import view as vm
from attnviz.core.attention import PatchGrid
from attnviz.core.view_names import tab_title
from attnviz.gui import style
from attnviz.gui.views import declared as declared_heads
from attnviz.gui.views.base import View, info_label
from attnviz.gui.widgets.query_buttons import QueryButtons

THUMB_PX = 96
OVERLAY_PX = 448  # the heat overlay is computed at least this large
CAPTION_ROOM = 0.07  # of the picture's longer side: the room above the tiles and the global image for their captions


def heat_rgba(ov: vm.OverlayView | vm.OverlayPanel, cmap: str = style.HEAT_NAME) -> np.ndarray:
    """The view model's heat and opacity as ``[H, W, 4]`` uint8 (the figure maps the same numbers)."""
    rgb = style.lut(cmap)[np.clip(ov.heat * 255, 0, 255).astype(np.uint8)][..., :3]
    return np.dstack([rgb, np.round(ov.alpha * 255)]).astype(np.uint8)


def to_pixmap(rgb: np.ndarray) -> QPixmap:
    rgb = np.ascontiguousarray(rgb[..., :3], dtype=np.uint8)
    h, w, _ = rgb.shape
    qimg = QImage(rgb.data, w, h, 3 * w, QImage.Format.Format_RGB888).copy()
    return QPixmap.fromImage(qimg)


def _resize(img: np.ndarray, side: int) -> np.ndarray:
    """Nearest-neighbour thumbnail ``[side, side, 3]`` (numpy only)."""
    h, w = img.shape[:2]
    ys = (np.arange(side) * h // side).clip(0, h - 1)
    xs = (np.arange(side) * w // side).clip(0, w - 1)
    return img[ys][:, xs]


def _picture() -> tuple[pg.ViewBox, pg.ImageItem, pg.ImageItem, QGraphicsRectItem]:
    """A view box with the image, the heat over it and the query patch's outline (a clicked patch), as the
    exported figure draws them."""
    vb = pg.ViewBox(lockAspect=True, invertY=True, enableMenu=False)
    image, overlay = pg.ImageItem(axisOrder="row-major"), pg.ImageItem(axisOrder="row-major")
    overlay.setZValue(5)
    outline = QGraphicsRectItem()
    outline.setPen(pg.mkPen(vm.QUERY_OUTLINE, width=1.5, cosmetic=True))
    outline.setZValue(10)
    outline.hide()
    for item in (image, overlay, outline):
        vb.addItem(item)
    return vb, image, overlay, outline


# a run on raw feeds keeps the model's pixel values, not a picture: the heat lies on a flat grey square, and saying so
# keeps it from being read as the image (the figure command says the same, figures.select)
NO_PICTURE = (
    " · no picture under the heat (the run had raw pixel feeds, not an image file): choose an image file to see one"
)


class ImageRegionsView(View):
    title = tab_title("image")
    # the colour-scale and log boxes apply (the view model's heat_scale): fixed 0–1, shared by the block's heads (a
    # query's row in every head: heads compare), or stretched to the map's own peak (the default here); the info
    # line says which.  Its choice is its own (Selection.image_scale): the box shows it while this tab is up
    scale_field = "image_scale"

    def __init__(self, session, parent=None):
        super().__init__(session, parent)
        self.queries: list[tuple[str, int]] = []  # (label, query row in the source block)
        self.query = 0
        self.patch_map: np.ndarray | None = None
        self.global_map: np.ndarray | None = None  # the global image's map beside the tiles (None: one picture)
        self._image_size: tuple[int, int] | None = None  # (height, width) of the image drawn, in its pixels
        self._struct_key = None
        self._strip_key: tuple | None = None  # (result, selection) the strip was drawn for

    def build(self) -> None:
        style.configure()
        self.glw = pg.GraphicsLayoutWidget()
        self.vb, self.image_item, self.overlay_item, self.query_outline = _picture()
        self.glw.ci.addItem(self.vb, row=0, col=0)
        self.glw.ci.layout.setColumnStretchFactor(0, 1)
        # a tiled VLM image's global image: a second picture beside the tiles, captioned with the row's share of
        # each (the view model's OverlayView.global_panel); in the layout only while there is one
        self.gvb, self.g_image_item, self.g_overlay_item, self.g_outline = _picture()
        self.captions = (pg.TextItem(anchor=(0.5, 1.0)), pg.TextItem(anchor=(0.5, 1.0)))  # just above each picture
        for vb, caption in zip((self.vb, self.gvb), self.captions):
            caption.setColor("k")
            caption.hide()
            vb.addItem(caption)
        self._two = False
        # the heat's scale, as the exported figure draws it beside the picture: the weights of the colour scale in
        # force (the info line's "colours span 0–…" alone left the colours without numbers)
        self.colorbar = pg.ColorBarItem(
            values=(0, 1), colorMap=style.colormap(style.HEAT_NAME), interactive=False, width=14
        )
        self.colorbar.axis.enableAutoSIPrefix(False)
        self.glw.ci.addItem(self.colorbar, row=0, col=2)
        # the bar spans the picture's height, not the plot's: the view box letterboxes the square picture
        self.vb.sigResized.connect(self._fit_colorbar)
        self.vb.sigRangeChanged.connect(self._fit_colorbar)
        self.glw.scene().sigMouseClicked.connect(self._on_click)
        self.query_bar = QueryButtons()
        self.strip_bar = QHBoxLayout()
        self.strip: list[QToolButton] = []
        swrap = QWidget()
        swrap.setLayout(self.strip_bar)
        self.strip_scroll = QScrollArea()
        self.strip_scroll.setWidgetResizable(True)
        self.strip_scroll.setWidget(swrap)
        self.strip_scroll.setFixedHeight(THUMB_PX + 64)
        self.strip_scroll.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.base_box = QComboBox()
        for name, (text, _) in vm.IMAGE_BASES.items():
            self.base_box.addItem(text, name)
        self.base_box.setToolTip(
            "what lies under the heat: the image in grey (default), in its own colours, or no image (heat only); "
            "File ▸ Export view draws the same"
        )
        self.base_box.currentIndexChanged.connect(
            lambda _i: self.session.select(image_base=self.base_box.currentData())
        )
        # one prompt's several images (a vision–language model): which one the words' attention is drawn over
        self.picture_box = QComboBox()
        self.picture_box.setToolTip(
            "the prompt held several images: the image whose tokens the words' attention is drawn over "
            "(File ▸ Export view draws the same; attnviz figure --picture N)"
        )
        self.picture_box.currentIndexChanged.connect(self._on_picture)
        self.picture_box.hide()
        # a vision–language model or a captioner: the words' attention over the image, or the vision tower's own
        # (the view model's IMAGE_FROM; shown only where the two are different blocks)
        self.from_box = QComboBox()
        self.from_box.setToolTip(
            "whose attention lies over the image: the words' (where each word looks) or the vision tower's own "
            "(patch to patch); File ▸ Export view draws the same"
        )
        self.from_box.currentIndexChanged.connect(self._on_from)
        self.from_box.hide()
        top = QHBoxLayout()
        top.addWidget(self.query_bar, 1)
        top.addWidget(self.from_box)
        top.addWidget(self.picture_box)
        top.addWidget(self.base_box)
        self.info = info_label()
        lay = QVBoxLayout(self.body)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addLayout(top)
        lay.addWidget(self.info)
        lay.addWidget(self.glw, 1)
        lay.addWidget(self.strip_scroll)

    # -- which block / which queries ------------------------------------------
    def source(self):
        """(block index, grid, kind) of the attention over image patches, or None (the view model's choice)."""
        s = self.session
        # a Swin's stages are one attention at several grids: the stage selected is the one shown (and exported)
        staged = 0 <= s.sel.block < len(s.blocks) and s.blocks[s.sel.block].stage
        prefer = s.sel.block if staged else None
        # the words' attention (captioning: cross-attention; a VLM: its decoder's), or the vision tower's own
        return vm.image_source(self._pictured(), s.blocks, prefer, s.sel.image_from)

    def _pictured(self):
        """The result seen through the image chosen of its prompt's several (the result itself for one image)."""
        s = self.session
        return vm.pictured(s.result, min(s.sel.picture, vm.picture_count(s.result) - 1), s.sel.batch)

    def reason(self) -> str | None:
        why = super().reason()
        if why:
            return why
        if self.source() is None:
            return "Image regions need an image input (a vision or captioning model); this result has no image patches."
        return None

    def _build_queries(self) -> None:
        s = self.session
        bi, grid, _kind = self.source()
        self.queries = vm.image_queries(self._pictured(), s.blocks[bi], grid)
        self._make_buttons()
        # the view model's choice, as `attnviz figure --view image` without --query draws it
        self.query = (
            vm.default_image_query(s.result, s.sel.with_(block=bi, query=None), s.blocks) if self.queries else 0
        )

    def _make_buttons(self) -> None:
        """One button per query, named as the view model names it (a word written twice with its place, "a (5)"),
        a decoder row's tooltip saying the token it reads and the word it produced."""
        s = self.session
        blk = s.blocks[self.source()[0]]
        tips = [vm.query_tip(self._pictured(), blk, row) for _, row in self.queries]
        self.query_bar.fill(vm.query_names(self.queries), self.set_query, tips)

    def _on_click(self, ev) -> None:
        """A click on the image makes the patch under it the query (self-attention over patches: a ViT, a Swin
        stage); the last clicked patch has one button of its own, and File ▸ Export view draws it too."""
        src = self.source() if self.session.result is not None else None
        if src is None or src[2] != "self" or ev.button() != Qt.MouseButton.LeftButton or self._image_size is None:
            return
        # a patch of the global image, beside the tiles, or of the tiles (or the one picture)
        on_global = self._two and self.gvb.sceneBoundingRect().contains(ev.scenePos())
        at = (self.gvb if on_global else self.vb).mapSceneToView(ev.scenePos())
        h, w = self._image_size
        picked = vm.patch_query(src[1], at.x(), at.y(), w, h, on_global)  # named by the view model, as in the figure
        if picked is None:
            return
        # one clicked patch at a time
        keep = [q for q in self.queries if not vm.is_patch_label(q[0])]
        self.queries = [*keep, picked]
        self._make_buttons()
        self.set_query(len(self.queries) - 1)

    def _on_picture(self, i: int) -> None:
        if i >= 0 and self.picture_box.isVisible():
            self.session.select(picture=i)

    def _on_from(self, i: int) -> None:
        """Another attention over the image: the block that draws it is selected with it, so the layer and head
        controls (and the block box) are that block's, as for the block a tab opens on."""
        if i >= 0 and self.from_box.count() > 1:
            self.choose_from(self.from_box.itemData(i))

    def choose_from(self, name: str) -> None:
        """Draw attention ``name`` (the view model's IMAGE_FROM) over the image, with the block that draws it
        selected (the chooser, ``attnviz open --image-from``)."""
        s = self.session
        src = vm.image_source(self._pictured(), s.blocks, None, name)  # an unknown name: one line
        moved = rules.on_block(s.sel, s.blocks, src[0]) if src is not None else s.sel
        s.select(image_from=name, block=moved.block, mode=moved.mode)

    def _show_from(self) -> None:
        """The attention chooser: one entry per attention this result draws over a block of its own, shown only
        where there are two (a ViT has one)."""
        s = self.session
        entries = vm.image_attentions(self._pictured(), s.blocks)
        self.from_box.blockSignals(True)  # showing the selection is not a new choice
        if [self.from_box.itemData(i) for i in range(self.from_box.count())] != [e.name for e in entries]:
            self.from_box.clear()
            for k, e in enumerate(entries):
                self.from_box.addItem(e.text, e.name)
                self.from_box.setItemData(k, e.tip, Qt.ItemDataRole.ToolTipRole)
        # an attention this result lacks draws the words' (the view model's fallback): the first entry
        self.from_box.setCurrentIndex(max(0, self.from_box.findData(s.sel.image_from)))
        self.from_box.setVisible(len(entries) > 1)
        self.from_box.blockSignals(False)

    def _show_pictures(self) -> None:
        """The image chooser: shown, with one entry per image, only for a prompt that held several."""
        s = self.session
        n = vm.picture_count(s.result)
        self.picture_box.blockSignals(True)  # showing the selection is not a new choice
        if self.picture_box.count() != n:
            self.picture_box.clear()
            self.picture_box.addItems([f"image {k + 1} of {n}" for k in range(n)])
        self.picture_box.setCurrentIndex(min(s.sel.picture, n - 1))
        self.picture_box.setVisible(n > 1)
        self.picture_box.blockSignals(False)

    def on_result(self) -> None:
        self._struct_key = None
        bi, _grid, kind = self.source()
        if kind == "cross":  # a captioner's words: open on the heads it declares (trained to point), as Alignment does
            declared_heads.open_on_declared(self.session, bi)

    # -- maps -------------------------------------------------------------------
    def overlay_for(self, qi: int, size: tuple[int, int] | None = None, strip: bool = False) -> vm.OverlayView:
        """Query ``qi``'s overlay on the selection's colour scale, or (``strip``) a strip panel's own stretched one."""
        s = self.session
        bi = self.source()[0]
        sel = s.sel.with_(block=bi, query=self.queries[qi][1])
        return vm.overlay_view(s.result, vm.panel_selection(sel) if strip else sel, size, s.blocks)

    def patch_map_for(self, qi: int) -> np.ndarray:
        return self.overlay_for(qi).patch

    def base_image(self, grid: PatchGrid) -> np.ndarray:
        img = self._pictured().image  # the image chosen of a prompt's several
        if img is None:
            return np.full((grid.rows * 16, grid.cols * 16, 3), 200, np.uint8)
        img = np.asarray(img)
        if img.ndim == 2:
            img = np.dstack([img] * 3)
        return img[..., :3].astype(np.uint8)

    def set_query(self, qi: int) -> None:
        self.query = qi
        self.draw()

    def draw(self) -> None:
        s = self.session
        self._show_pictures()
        self._show_from()
        bi, grid, kind = self.source()
        # another image of the prompt: its own words (after its tokens); another beam: its own words too
        key = (id(s.result), bi, s.sel.picture, s.sel.batch)
        if key != self._struct_key:
            self._build_queries()
            self._struct_key = key
            self._strip_key = None
        if s.sel.step >= 0 and vm.words_query(self._pictured(), s.blocks[bi]):  # the word generated at that step
            self.query = vm.step_query(s.result, s.blocks[bi], self.queries, s.sel.step)
        self.query = min(self.query, len(self.queries) - 1)
        self.query_bar.check(self.query)
        img = self.base_image(grid)
        h, w = img.shape[:2]
        self._image_size = (h, w)
        # the overlay is computed at screen resolution, not at the (often 32-224 px) model input size
        k = max(1, int(np.ceil(OVERLAY_PX / max(h, w))))
        ov = self.overlay_for(self.query, (h * k, w * k))
        self.patch_map = ov.patch
        self.global_map = ov.global_panel.patch if ov.global_panel is not None else None
        base = s.sel.image_base
        if self.base_box.currentData() != base:
            self.base_box.blockSignals(True)  # showing the selection is not a new choice
            self.base_box.setCurrentIndex(max(0, self.base_box.findData(base)))
            self.base_box.blockSignals(False)
        under = np.round(vm.base_rgb(img, base) * 255).astype(np.uint8)
        glob = ov.global_panel
        self._show_two(glob is not None)
        pictures: list[tuple] = [(self.vb, self.image_item, self.overlay_item, self.query_outline, ov)]
        top = 0.0
        if glob is not None:
            pictures.append((self.gvb, self.g_image_item, self.g_overlay_item, self.g_outline, glob))
            top = CAPTION_ROOM * max(h, w)  # room above each picture for its caption
            for label, text in zip(self.captions, ov.captions):
                label.setText(text)
                label.setPos(w / 2, 0)
        for vb, image_item, overlay_item, outline, panel in pictures:
            image_item.setImage(under, autoLevels=False, levels=(0, 255))
            overlay_item.setImage(heat_rgba(panel), autoLevels=False, levels=(0, 255))
            overlay_item.setRect(QRectF(0, 0, w, h))
            rect = panel.query_rect(w, h)
            outline.setVisible(rect is not None)
            if rect is not None:
                outline.setRect(QRectF(*rect))
            vb.setRange(QRectF(0, -top, w, h + top), padding=0)
        hs = ov.scale  # the colour bar states the scale in force, in weights (log10 of them on the log scale)
        levels = (np.log10(hs.vmin), np.log10(hs.vmax)) if hs.log else (hs.vmin, hs.vmax)
        style.set_colorbar(self.colorbar, (float(levels[0]), float(levels[1])), hs.log, hs.label)
        self._fit_colorbar()
        blk = s.blocks[bi]
        # the view model's words: a ViT's "+1 non-patch", SigLIP's none; the peaks named as clicked patches are
        note = vm.grid_note(self._pictured(), blk, grid)
        self.info.setText(
            f"{ov.query_text} · {ov.title.rsplit(' · query', 1)[0]} · grid {grid.rows}×{grid.cols}"
            f"{f' ({note})' if note else ''} · {ov.peak} · {hs.note}"
            f"{NO_PICTURE if s.result.image is None else ''}"
        )
        self.block_name = blk.name
        self._draw_strip(grid, img, kind)

    def _fit_colorbar(self, *_args) -> None:
        """Pad the colour bar above and below so that its bar runs from the picture's top to its bottom (the view
        box keeps the picture's aspect, so a tall view left the bar spanning the plot's full height beside a
        shorter picture). Only vertical margins change: the columns, and so the picture's size, stay as they are."""
        if self._image_size is None:
            return
        h, w = self._image_size
        pic = self.vb.mapViewToScene(QRectF(0, 0, w, h)).boundingRect()
        cell = self.colorbar.mapRectToScene(self.colorbar.rect())  # its layout cell: our margins do not move it
        left, top, right, bottom = self.colorbar.getContentsMargins()
        # the bar fills the item's own layout inside its margins (the bar's drawn rect lags a margin change until the
        # layout runs again, so it is not read back here)
        _l, inner_top, _r, inner_bottom = self.colorbar.layout.getContentsMargins()
        want_top = max(0.0, pic.top() - cell.top() - inner_top)
        want_bottom = max(0.0, cell.bottom() - pic.bottom() - inner_bottom)
        if abs(want_top - top) >= 0.5 or abs(want_bottom - bottom) >= 0.5:
            self.colorbar.setContentsMargins(left, want_top, right, want_bottom)

    def _show_two(self, two: bool) -> None:
        """The global image's picture and the two captions in the layout, or the tiles' picture alone."""
        if two == self._two:
            return
        self._two = two
        lay = self.glw.ci
        for caption in self.captions:
            caption.setVisible(two)
        if two:
            lay.addItem(self.gvb, row=0, col=1)
        else:
            lay.removeItem(self.gvb)
        lay.layout.setColumnStretchFactor(1, int(two))  # two pictures of one size, or the one across the view

    def _draw_strip(self, grid, img, kind) -> None:
        s = self.session
        key = (id(s.result), s.sel)
        if key == self._strip_key:
            return
        self._strip_key = key
        while self.strip_bar.count():
            it = self.strip_bar.takeAt(0)
            old = it.widget() if it is not None else None
            if old is not None:
                old.hide()  # (as above) an old thumbnail must not paint behind the new strip
                old.deleteLater()
        self.strip = []
        if kind != "cross":
            self.strip_scroll.hide()
            return
        self.strip_scroll.show()
        small = _resize(img, THUMB_PX)
        for qi, label in enumerate(vm.query_names(self.queries)):  # named as the query buttons are
            ov = self.overlay_for(qi, small.shape[:2], strip=True)
            icon = vm.composite(small, heat_rgba(ov)[..., :3] / 255.0, ov.alpha, ov.base)
            b = QToolButton()
            b.setIcon(QIcon(to_pixmap(icon)))
            b.setIconSize(QSize(THUMB_PX, THUMB_PX))
            b.setText(label)
            b.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextUnderIcon)
            b.clicked.connect(lambda _=False, qi=qi: self.set_query(qi))
            self.strip_bar.addWidget(b)
            self.strip.append(b)
        self.strip_bar.addStretch(1)
