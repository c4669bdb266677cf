"""The window's status bar: a message too long for the room left of the permanent widgets (the device label, the
compare indicator) is drawn elided with "…" there, whole in the bar's tooltip.

QStatusBar itself clips such a message mid-letter at the first permanent widget, which reads as text running under
the device label (a GUI walk: the unknown-token note, the ablation outcome). ``currentMessage()`` stays the whole
text: only the drawing is shortened."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QRect, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QStatusBar, QStyle, QStyleOption, QWidget

# QStatusBar's own margins for the message (qstatusbar.cpp, QStatusBarPrivate::messageRect)
LEFT_MARGIN = 6
RIGHT_MARGIN = 12
GAP = 2  # px kept between the message and the first permanent widget


class ElidingStatusBar(QStatusBar):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._items: list[tuple[QWidget, bool]] = []  # (widget, permanent), in the order added
        self.messageChanged.connect(self._tooltip)

    def addWidget(self, widget: QWidget, stretch: int | None = 0) -> None:
        super().addWidget(widget, stretch or 0)
        self._items.append((widget, False))

    def addPermanentWidget(self, widget: QWidget, stretch: int | None = 0) -> None:
        super().addPermanentWidget(widget, stretch or 0)
        self._items.append((widget, True))
        widget.installEventFilter(self)  # its moves change the message's room: redraw the message

    def eventFilter(self, watched, event) -> bool:
        if event.type() in (QEvent.Type.Move, QEvent.Type.Resize, QEvent.Type.Show, QEvent.Type.Hide):
            self.update()
        return super().eventFilter(watched, event)

    def removeWidget(self, widget: QWidget) -> None:
        super().removeWidget(widget)
        self._items = [(w, p) for w, p in self._items if w is not widget]

    def _tooltip(self, message: str) -> None:
        self.setToolTip(message)

    def message_rect(self) -> QRect:
        """Where the message may be drawn: from the left margin to just before the first visible permanent widget
        (the one QStatusBar's layout puts leftmost of them)."""
        right = self.width() - RIGHT_MARGIN
        shown = [w for w, permanent in self._items if permanent and w.isVisible()]
        if shown:
            right = min(right, min(w.x() for w in shown) - GAP)
        return QRect(LEFT_MARGIN, 0, max(0, right - LEFT_MARGIN), self.height())

    def shown_message(self) -> str:
        """The message as drawn: whole when it fits, else cut at its end with "…"."""
        return self.fontMetrics().elidedText(
            self.currentMessage(), Qt.TextElideMode.ElideRight, self.message_rect().width()
        )

    def paintEvent(self, event) -> None:
        # QStatusBar.paintEvent, with the message elided (its C++ draws the whole text clipped to the rect)
        message = self.currentMessage()
        p = QPainter(self)
        opt = QStyleOption()
        opt.initFrom(self)
        self.style().drawPrimitive(QStyle.PrimitiveElement.PE_PanelStatusBar, opt, p, self)
        for w, permanent in self._items:
            if w.isVisible() and (permanent or not message):
                frame = QStyleOption()
                frame.rect = w.geometry().adjusted(-2, -1, 2, 1)
                frame.palette = self.palette()
                frame.state = QStyle.StateFlag.State_None
                if event.rect().intersects(frame.rect):
                    self.style().drawPrimitive(QStyle.PrimitiveElement.PE_FrameStatusBarItem, frame, p, w)
        if message:
            p.setPen(self.palette().windowText().color())
            flags = Qt.AlignmentFlag.AlignLeading | Qt.AlignmentFlag.AlignVCenter | Qt.TextFlag.TextSingleLine
            p.drawText(self.message_rect(), flags, self.shown_message())
        p.end()
