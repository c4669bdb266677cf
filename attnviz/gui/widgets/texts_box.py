"""A dual encoder's candidate texts, one a line: a text may hold any character but a line break (a ';' too, which
split the one-line box's texts before), so every text the command line's repeated ``--text`` gives can be typed."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QPlainTextEdit

TEXTS_HINT = "one text a line (each scored against the image):\na photo of a cat\na photo of a dog"
TEXTS_TIP = (
    "A dual encoder (CLIP, SigLIP) scores the image against each text: one text a line (a line may hold ';' and "
    "any other character), each a batch row, as --text given once per text on the command line. Several images "
    "in the image box (a.png; b.png) are each scored against the texts. The Run section lists the scores; the box "
    "beside the views switches the maps shown. Ctrl+Enter runs."
)
LINES_SHOWN = 4  # the box's height in lines (it scrolls past them)


def split_lines(text: str | None) -> str | list[str] | None:
    """The box's text as the request's text: one text, or each non-empty line (spaces at its ends dropped)."""
    if not text:
        return None
    texts = [t.strip() for t in text.splitlines() if t.strip()]
    if not texts:
        return None
    return texts if len(texts) > 1 else texts[0]


class TextsBox(QPlainTextEdit):
    """Several lines of text; Ctrl+Enter asks to run (Enter starts the next text)."""

    run_requested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setPlaceholderText(TEXTS_HINT)
        self.setToolTip(TEXTS_TIP)
        self.setTabChangesFocus(True)
        lines = self.fontMetrics().lineSpacing() * LINES_SHOWN
        self.setFixedHeight(lines + 2 * self.frameWidth() + 8)

    def keyPressEvent(self, event) -> None:
        if (
            event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
            and event.modifiers() & Qt.KeyboardModifier.ControlModifier
        ):
            self.run_requested.emit()
            return
        super().keyPressEvent(event)
