"""The key under the Overview while a comparison is held (File ▸ Compare with…): what the divergence frames'
colours say and on which scale -- the view model's :class:`~attnviz.core.view.FramesKey`, whose words, colours and
numbers the exported figure's key draws too.  Before it the frames had tooltips only: a red frame's number was a
hover away, and the scale (the most divergent head's JS) nowhere."""

from __future__ import annotations

from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from attnviz.core import view as vm
from attnviz.gui.views.base import info_label

STRIP_PX = (180, 12)  # the colour strip's width and height


class FramesKeyBar(QWidget):
    """Two lines under the grid: ``title (note)`` (wrapped where the tab is narrow), then ``0 [white … dark red]
    top``; hidden until :meth:`show_key`."""

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 2, 4, 2)
        lay.setSpacing(2)
        self.title = info_label()
        lay.addWidget(self.title)
        row = QHBoxLayout()
        row.setSpacing(6)
        self.low = QLabel("0")
        self.strip = QFrame()
        self.strip.setFixedSize(*STRIP_PX)
        self.high = QLabel()
        for w in (self.low, self.strip, self.high):
            row.addWidget(w)
        row.addStretch(1)
        lay.addLayout(row)
        self.key: vm.FramesKey | None = None
        self.hide()

    def show_key(self, key: vm.FramesKey) -> None:
        self.key = key
        self.title.setText(f"{key.title} ({key.note}):")
        ticks = key.ticks()
        self.low.setText(ticks[0][1])
        self.high.setText(ticks[-1][1])
        cols = key.colours
        stops = ", ".join(f"stop:{i / (len(cols) - 1):.4f} {c}" for i, c in enumerate(cols))
        # the frames' colours, evenly spaced from JS 0 to the top as divergence_colour interpolates them
        self.strip.setStyleSheet(
            f"QFrame {{ background: qlineargradient(x1:0, y1:0, x2:1, y2:0, {stops}); border: 1px solid #888; }}"
        )
        self.setToolTip(f"{key.title}: 0 (white) to {ticks[-1][1]} (darkest red, the most divergent head)")
        self.show()

    def clear(self) -> None:
        self.key = None
        self.hide()
