"""The batch row box: a spin box whose text names what the row holds where the rows have names (a dual encoder's
``3  image 1 × text 1``), not a bare number that sends the reader to the Run section to decode it."""

from __future__ import annotations

import re

from PySide6.QtGui import QValidator
from PySide6.QtWidgets import QSpinBox

_LEADING = re.compile(r"\s*(\d+)")


class RowSpinBox(QSpinBox):
    """A QSpinBox showing ``N  name`` (``names[N]``) when ``set_names`` gave names; a typed number picks the row
    (whatever follows it is the name, read back as nothing)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.names: list[str] = []

    def set_names(self, names: list[str]) -> None:
        self.names = list(names)
        self.lineEdit().setText(self.textFromValue(self.value()))

    def textFromValue(self, v: int) -> str:
        name = self.names[v] if 0 <= v < len(self.names) else ""
        return f"{v}  {name}" if name else str(v)

    def valueFromText(self, text: str) -> int:
        m = _LEADING.match(text)
        return int(m.group(1)) if m else self.value()

    def validate(self, text: str, pos: int):  # the row's number first; its name after it is the box's own
        m = _LEADING.match(text)
        if m is None:
            return QValidator.State.Intermediate, text, pos
        ok = self.minimum() <= int(m.group(1)) <= self.maximum()
        return (QValidator.State.Acceptable if ok else QValidator.State.Intermediate), text, pos
