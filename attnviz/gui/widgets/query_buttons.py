"""A row of query buttons that scrolls sideways: the words (or patches) a view can make its query, one checked."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QButtonGroup, QHBoxLayout, QPushButton, QScrollArea, QStyle, QWidget

PAD_PX = 16  # STYLE's 6 px padding on each side, and a little for the frame
STYLE = "QPushButton { padding: 2px 6px; } QPushButton:checked { background: #ffd27f; font-weight: bold; }"


class QueryButtons(QScrollArea):
    """Flat checkable buttons, one checked at most (Image regions' queries, Audio regions' words): :meth:`fill`
    replaces them, :meth:`check` marks one."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.bar = QHBoxLayout()
        self.group = QButtonGroup(self)
        self.group.setExclusive(True)
        self.buttons: list[QPushButton] = []
        wrap = QWidget()
        wrap.setLayout(self.bar)
        self.setWidgetResizable(True)
        self.setWidget(wrap)
        # one row scrolls sideways only: a fixed height that left the row a few pixels short beside the horizontal
        # bar showed a vertical scrollbar too (fill sizes the height to the row plus that bar instead)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFixedHeight(48)

    def fill(self, labels: Sequence[str], on_click: Callable[[int], None], tips: Sequence[str] = ()) -> None:
        """One button per label, in order (``tips``: each button's tooltip, where given); a click calls ``on_click``
        with the button's index."""
        for b in self.buttons:
            self.group.removeButton(b)
            self.bar.removeWidget(b)
            b.hide()  # deleteLater waits for the event loop; until then an old button would still paint
            b.deleteLater()
        self.buttons = []
        for i, label in enumerate(labels):
            b = QPushButton(label)
            b.setCheckable(True)
            b.setFlat(True)
            b.setStyleSheet(STYLE)
            # room for the label in bold: the checked button's bold text was clipped ("photc") where the bar is full
            bold = QFont(b.font())
            bold.setBold(True)
            b.setMinimumWidth(QFontMetrics(bold).horizontalAdvance(label) + PAD_PX)
            if i < len(tips) and tips[i]:
                b.setToolTip(tips[i])
            b.clicked.connect(lambda _=False, i=i: on_click(i))
            self.group.addButton(b)
            self.bar.addWidget(b)
            self.buttons.append(b)
        if self.buttons:  # the row whole, above the horizontal bar a long row shows (never cut at the bottom)
            # from the buttons' own heights: in a shown window the new buttons are not shown until the event loop
            # runs, so the layout's size hint still counts its margins alone
            margins = self.bar.contentsMargins()
            row = max(b.sizeHint().height() for b in self.buttons) + margins.top() + margins.bottom()
            bar_px = self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent, None, self)
            self.setFixedHeight(row + bar_px + 2 * self.frameWidth())

    def check(self, index: int | None) -> None:
        """Button ``index`` checked and the others not; None: none (a query that is no button's)."""
        self.group.setExclusive(False)  # an exclusive group will not uncheck its checked button
        for i, b in enumerate(self.buttons):
            b.setChecked(i == index)
        self.group.setExclusive(True)
