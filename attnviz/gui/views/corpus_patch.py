"""The Corpus view's picture of a tower corpus example (attnviz/app/corpus_patches.py): the image as the
processor resized it, the query's patch and the key's outlined on it (each within its tile, outlined thinly),
their labels and names beneath; names only, and why, where the image cannot be drawn."""

from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from attnviz.app.corpus_patches import Box, ExampleImage
from attnviz.gui.views.image_regions import to_pixmap

SIDE = 260  # the picture's longest side on screen, pixels
# Okabe–Ito, as the roles' colours: the query's patch orange, the key's blue
QUERY_COLOR, KEY_COLOR, TILE_COLOR = "#E69F00", "#56B4E9", "#FFFFFF"


class PatchPreview(QWidget):
    """Hidden until :meth:`show_example`; ``picture`` holds the drawn image, ``caption`` the patches' names."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.picture = QLabel()
        self.picture.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.picture.setMinimumSize(SIDE, SIDE)
        self.caption = QLabel("Pick an example to see its patches on its image.")
        self.caption.setWordWrap(True)
        self.caption.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.picture)
        lay.addWidget(self.caption)
        lay.addStretch(1)
        self.setFixedWidth(SIDE + 20)
        self.shown: ExampleImage | None = None

    def show_example(self, ex: ExampleImage, image_name: str) -> None:
        self.shown = ex
        lines = [
            f'<span style="color:{QUERY_COLOR}">■</span> query {_escape(ex.query.label)}: {_escape(ex.query.name)}',
            f'<span style="color:{KEY_COLOR}">■</span> key {_escape(ex.key.label)}: {_escape(ex.key.name)}',
        ]
        if ex.shown is None:
            self.picture.clear()
            lines.append(f"<i>{_escape(ex.note)}</i>")
        else:
            self.picture.setPixmap(self._drawn(ex))
            h, w = ex.shown.shape[:2]
            lines.append(f"{_escape(image_name)}, {w}×{h} as the processor resized it")
        self.caption.setText("<br>".join(lines))

    def _drawn(self, ex: ExampleImage):
        assert ex.shown is not None
        h, w = ex.shown.shape[:2]
        scale = SIDE / max(h, w)
        pix = to_pixmap(ex.shown).scaled(
            round(w * scale),
            round(h * scale),
            Qt.AspectRatioMode.IgnoreAspectRatio,
            Qt.TransformationMode.SmoothTransformation,
        )
        p = QPainter(pix)
        try:
            whole = (0.0, 0.0, float(h), float(w))
            for region in (ex.query, ex.key):
                if region.frame is not None and region.frame != whole:  # the patch's tile: where to look for it
                    _outline(p, region.frame, scale, TILE_COLOR, 1, Qt.PenStyle.DashLine)
            for region, color, width in ((ex.query, QUERY_COLOR, 3), (ex.key, KEY_COLOR, 2)):
                if region.box is not None:
                    _outline(p, region.box, scale, color, width, Qt.PenStyle.SolidLine)
        finally:
            p.end()
        return pix


MIN_BOX = 6.0  # pixels on screen: a large image's patch (SmolVLM's 16 of 2048) would be a dot at SIDE


def _outline(p: QPainter, box: Box, scale: float, color: str, width: int, style) -> None:
    """``box`` (image pixels) outlined at ``scale``, at least :data:`MIN_BOX` a side around its centre."""
    pen = QPen(QColor(color), width, style)
    pen.setCosmetic(True)
    p.setPen(pen)
    top, left, bottom, right = (v * scale for v in box)
    h, w = max(MIN_BOX, bottom - top), max(MIN_BOX, right - left)
    cy, cx = (top + bottom) / 2, (left + right) / 2
    p.drawRect(QRectF(cx - w / 2, cy - h / 2, w - 1, h - 1))


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
