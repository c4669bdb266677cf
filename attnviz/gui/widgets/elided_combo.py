"""A combo box for long item names (a VLM's blocks: "decoder self-attention (image) (28×16)"): closed, it shows
the current item elided in the middle (both ends say which block), its tooltip the whole name; its popup is as wide
as its longest item. A plain QComboBox cut the name's end (its size, its tower) at the box's edge; its popup's
width depends on the style (Fusion already fits the longest item): showPopup makes it so for any."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QStyle, QStyleOptionComboBox, QStylePainter

# the closed box asks for this many characters, not its longest item's: a long name must not widen the dock
MIN_CHARS = 12
POPUP_MARGIN = 24  # px beyond the longest item's text: the view's frame and item padding


class ElidedCombo(QComboBox):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.setMinimumContentsLength(MIN_CHARS)
        self.currentTextChanged.connect(self.setToolTip)

    def _field_width(self, opt: QStyleOptionComboBox) -> int:
        field = self.style().subControlRect(
            QStyle.ComplexControl.CC_ComboBox, opt, QStyle.SubControl.SC_ComboBoxEditField, self
        )
        return field.width()

    def shown_text(self) -> str:
        """The current item as the closed box draws it."""
        opt = QStyleOptionComboBox()
        self.initStyleOption(opt)
        return self.fontMetrics().elidedText(self.currentText(), Qt.TextElideMode.ElideMiddle, self._field_width(opt))

    def popup_width(self) -> int:
        """Wide enough for the longest item (and a scroll bar), never narrower than the box."""
        fm = self.view().fontMetrics()
        longest = max((fm.horizontalAdvance(self.itemText(i)) for i in range(self.count())), default=0)
        bar = self.view().verticalScrollBar().sizeHint().width() if self.count() > self.maxVisibleItems() else 0
        return max(self.width(), longest + POPUP_MARGIN + bar)

    def showPopup(self) -> None:
        self.view().setMinimumWidth(self.popup_width())  # QComboBox sizes its popup container from the view's
        super().showPopup()

    def paintEvent(self, event) -> None:
        # QComboBox.paintEvent, with the label elided in the middle (its own cuts the end off)
        p = QStylePainter(self)
        p.setPen(self.palette().text().color())
        opt = QStyleOptionComboBox()
        self.initStyleOption(opt)
        p.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, opt)
        opt.currentText = self.shown_text()
        p.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, opt)
