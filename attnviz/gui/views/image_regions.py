"""Image regions: the image with a chosen query's attention as a smoothed heat overlay.

Queries are the generated caption words (cross-attention over image patches) or, for a
vision encoder, CLS / the mean over patch queries (self-attention, rollout allowed).  A strip
below shows one thumbnail per generated word ("Show, Attend and Tell").
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PIL import Image
from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QIcon, QImage, QPixmap
from PySide6.QtWidgets import QButtonGroup, QHBoxLayout, QPushButton, QScrollArea, QToolButton, QVBoxLayout, QWidget

from attnviz.core.attention import PatchGrid
from attnviz.gui import style
from attnviz.gui.selection import alignment_rows, compute_map
from attnviz.gui.views.base import View, info_label

THUMB_PX = 96
OVERLAY_PX = 448  # the heat overlay is computed at least this large


def patch_grid_for(result, n_keys: int) -> PatchGrid | None:
    g = result.patch_grid
    if g is not None and g.offset + g.n <= n_keys:
        return g
    return PatchGrid.infer(n_keys)


def gaussian_blur(a: np.ndarray, sigma: float) -> np.ndarray:
    """Separable Gaussian blur of a 2-D float array (edges repeat)."""
    if sigma < 0.5:
        return a
    r = int(3 * sigma)
    x = np.arange(-r, r + 1, dtype=np.float32)
    k = np.exp(-0.5 * (x / sigma) ** 2)
    k /= k.sum()
    p = np.pad(a, r, mode="edge")
    p = np.apply_along_axis(lambda v: np.convolve(v, k, mode="valid"), 0, p)
    return np.apply_along_axis(lambda v: np.convolve(v, k, mode="valid"), 1, p)


def heat_rgba(patch_map: np.ndarray, size: tuple[int, int], cmap: str = style.HEAT_NAME) -> np.ndarray:
    """``[rows, cols]`` -> ``[H, W, 4]`` uint8: smooth upsampling, normalised, alpha grows with weight."""
    h, w = size
    m = np.asarray(patch_map, np.float32)
    lo, hi = float(m.min()), float(m.max())
    # min-max: shows where this query attends *relatively*; the info line gives the absolute range
    m = (m - lo) / (hi - lo) if hi > lo else np.zeros_like(m)
    im = Image.fromarray(np.ascontiguousarray(m, dtype=np.float32)).resize((w, h), Image.BICUBIC)
    cell = max(1.0, min(h / max(1, m.shape[0]), w / max(1, m.shape[1])))
    u = np.clip(gaussian_blur(np.asarray(im, np.float32), cell / 3), 0, 1)
    lut = style.lut(cmap)  # [256, 3 or 4]
    rgb = lut[(u * 255).astype(np.uint8)][..., :3]
    alpha = (30 + 200 * u).astype(np.uint8)  # weak attention lets the image show, the peak is nearly opaque
    return np.dstack([rgb, alpha]).astype(np.uint8)


def composite(image: np.ndarray, heat: np.ndarray) -> np.ndarray:
    a = heat[..., 3:4].astype(np.float32) / 255.0
    return (image[..., :3].astype(np.float32) * (1 - a) + heat[..., :3].astype(np.float32) * a).astype(np.uint8)


def to_pixmap(rgb: np.ndarray) -> QPixmap:
    rgb = np.ascontiguousarray(rgb[..., :3], dtype=np.uint8)
    h, w, _ = rgb.shape
    qimg = QImage(rgb.data, w, h, 3 * w, QImage.Format_RGB888).copy()
    return QPixmap.fromImage(qimg)


class ImageRegionsView(View):
    title = "Image regions"

    def __init__(self, session, parent=None):
        super().__init__(session, parent)
        style.configure()
        self.glw = pg.GraphicsLayoutWidget()
        self.vb = self.glw.addViewBox(lockAspect=True, invertY=True, enableMenu=False)
        self.image_item = pg.ImageItem(axisOrder="row-major")
        self.overlay_item = pg.ImageItem(axisOrder="row-major")
        self.overlay_item.setZValue(5)
        self.vb.addItem(self.image_item)
        self.vb.addItem(self.overlay_item)
        self.query_bar = QHBoxLayout()
        self.query_group = QButtonGroup(self)
        self.query_group.setExclusive(True)
        self.query_buttons: list[QPushButton] = []
        qwrap = QWidget()
        qwrap.setLayout(self.query_bar)
        qscroll = QScrollArea()
        qscroll.setWidgetResizable(True)
        qscroll.setWidget(qwrap)
        qscroll.setFixedHeight(48)
        self.strip_bar = QHBoxLayout()
        self.strip: list[QToolButton] = []
        swrap = QWidget()
        swrap.setLayout(self.strip_bar)
        self.strip_scroll = QScrollArea()
        self.strip_scroll.setWidgetResizable(True)
        self.strip_scroll.setWidget(swrap)
        self.strip_scroll.setFixedHeight(THUMB_PX + 64)
        self.strip_scroll.setVerticalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.info = info_label()
        lay = QVBoxLayout(self.body)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addWidget(qscroll)
        lay.addWidget(self.info)
        lay.addWidget(self.glw, 1)
        lay.addWidget(self.strip_scroll)
        self.queries: list[tuple[str, int]] = []  # (label, query row in the source block)
        self.query = 0
        self.patch_map: np.ndarray | None = None
        self._struct_key = None

    # -- which block / which queries ------------------------------------------
    def source(self):
        """(block index, grid, kind) of the attention over image patches, or None."""
        s = self.session
        r = s.result
        cross = [i for i, b in enumerate(s.blocks) if b.kind == "cross"]
        for i in reversed(cross):
            g = patch_grid_for(r, s.blocks[i].result.maps[s.blocks[i].sites[0]].shape[3])
            if g is not None and (r.image is not None or r.patch_grid is not None):
                return i, g, "cross"
        enc = [i for i, b in enumerate(s.blocks) if b.stack == "encoder" and b.kind == "self"]
        for i in enc:
            g = patch_grid_for(r, s.blocks[i].result.maps[s.blocks[i].sites[0]].shape[3])
            if g is not None and (r.image is not None or r.patch_grid is not None):
                return i, g, "self"
        return None

    def reason(self) -> str | None:
        why = super().reason()
        if why:
            return why
        if self.source() is None:
            return "Image regions need an image input (a vision or captioning model); this result has no image patches."
        return None

    def _build_queries(self) -> None:
        s = self.session
        bi, grid, kind = self.source()
        if kind == "cross":
            rows, words = alignment_rows(s.result, s.blocks[bi])
            self.queries = list(zip(words, [int(r) for r in rows]))
        else:
            self.queries = []
            if grid.offset > 0:
                self.queries.append(("CLS", 0))
            self.queries.append(("all patches (mean)", -1))
        for b in self.query_buttons:
            self.query_group.removeButton(b)
            self.query_bar.removeWidget(b)
            b.deleteLater()
        self.query_buttons = []
        for qi, (label, _) in enumerate(self.queries):
            b = QPushButton(label)
            b.setCheckable(True)
            b.setFlat(True)
            b.setStyleSheet("QPushButton { padding: 2px 6px; } QPushButton:checked { background: #ffd27f; font-weight: bold; }")
            b.clicked.connect(lambda _=False, qi=qi: self.set_query(qi))
            self.query_group.addButton(b)
            self.query_bar.addWidget(b)
            self.query_buttons.append(b)
        if kind == "self" or not self.queries:
            self.query = 0
        elif s.sel.step >= 0:
            self.query = min(s.sel.step, len(self.queries) - 1)
        else:  # all steps shown: start on the word whose attention is most focused
            peaks = [float(self.patch_map_for(qi).max()) for qi in range(len(self.queries))]
            self.query = int(np.argmax(peaks))

    def on_result(self) -> None:
        self._struct_key = None

    # -- maps -------------------------------------------------------------------
    def patch_map_for(self, qi: int) -> np.ndarray:
        s = self.session
        bi, grid, kind = self.source()
        sel = s.sel.with_(block=bi, step=-1, hide_special=False)
        if kind == "cross" and sel.mode == "rollout":
            sel = sel.with_(mode="mean")
        if sel.block != s.sel.block and sel.mode == "head":
            sel = sel.with_(head=min(sel.head, s.blocks[bi].heads_in(min(sel.layer, s.blocks[bi].n_layers - 1)) - 1))
        mv = compute_map(s.result, sel, s.blocks)
        _, row = self.queries[qi]
        if row < 0:
            vec = mv.matrix[grid.offset:].mean(axis=0)
        else:
            vec = mv.matrix[min(row, mv.matrix.shape[0] - 1)]
        return grid.to_image(vec)

    def base_image(self, grid: PatchGrid) -> np.ndarray:
        img = self.session.result.image
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
        bi, grid, kind = self.source()
        key = (id(s.result), bi)
        if key != self._struct_key:
            self._build_queries()
            self._struct_key = key
            self._strip_key = None
        if kind == "cross" and s.sel.step >= 0:
            self.query = min(s.sel.step, len(self.queries) - 1)
        self.query = min(self.query, len(self.queries) - 1)
        for i, b in enumerate(self.query_buttons):
            b.setChecked(i == self.query)
        img = self.base_image(grid)
        self.patch_map = self.patch_map_for(self.query)
        h, w = img.shape[:2]
        self.image_item.setImage(img, autoLevels=False, levels=(0, 255))
        # the overlay is smoothed at screen resolution, not at the (often 32-224 px) model input size
        k = max(1, int(np.ceil(OVERLAY_PX / max(h, w))))
        self.overlay_item.setImage(heat_rgba(self.patch_map, (h * k, w * k)), autoLevels=False, levels=(0, 255))
        self.overlay_item.setRect(QRectF(0, 0, w, h))
        self.vb.setRange(QRectF(0, 0, w, h), padding=0)
        blk = s.blocks[bi]
        label, _ = self.queries[self.query]
        r, c = np.unravel_index(int(np.argmax(self.patch_map)), self.patch_map.shape)
        self.info.setText(
            f"query “{label}” · {blk.name} · {s.sel.mode if s.sel.mode != 'head' else f'layer {s.sel.layer} head {s.sel.head}'}"
            f" · grid {grid.rows}×{grid.cols} (+{grid.offset} non-patch) · peak at patch ({r}, {c})"
            f" · weights {self.patch_map.min():.3g}–{self.patch_map.max():.3g} (colours span this range)")
        self._draw_strip(grid, img, kind)

    def _draw_strip(self, grid, img, kind) -> None:
        s = self.session
        key = (id(s.result), s.sel)
        if key == getattr(self, "_strip_key", None):
            return
        self._strip_key = key
        while self.strip_bar.count():
            it = self.strip_bar.takeAt(0)
            if it.widget() is not None:
                it.widget().deleteLater()
        self.strip = []
        if kind != "cross":
            self.strip_scroll.hide()
            return
        self.strip_scroll.show()
        small = np.asarray(Image.fromarray(img).resize((THUMB_PX, THUMB_PX), Image.BILINEAR))
        for qi, (label, _) in enumerate(self.queries):
            heat = heat_rgba(self.patch_map_for(qi), (THUMB_PX, THUMB_PX))
            b = QToolButton()
            b.setIcon(QIcon(to_pixmap(composite(small, heat))))
            b.setIconSize(QSize(THUMB_PX, THUMB_PX))
            b.setText(label)
            b.setToolButtonStyle(Qt.ToolButtonTextUnderIcon)
            b.clicked.connect(lambda _=False, qi=qi: self.set_query(qi))
            self.strip_bar.addWidget(b)
            self.strip.append(b)
        self.strip_bar.addStretch(1)
