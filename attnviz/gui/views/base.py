"""Base class of the tabbed views: redraw from the session only while visible."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSizePolicy, QStackedLayout, QVBoxLayout, QWidget

from attnviz import AttnvizError


def info_label() -> QLabel:
    """A one-line status label that wraps instead of widening the window when its text is long."""
    lab = QLabel(" ")
    lab.setWordWrap(True)
    lab.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    lab.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return lab


class View(QWidget):
    """A view of the session.  Subclasses implement :meth:`reason` and :meth:`draw`.

    Signal handlers only mark the view dirty when it is hidden, so a selection change redraws
    just the tab on screen; the others catch up when shown.
    """

    title = "view"

    def __init__(self, session, parent=None):
        super().__init__(parent)
        self.session = session
        self._dirty = True
        self._stack = QStackedLayout()
        self.placeholder = QLabel("")
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.placeholder.setWordWrap(True)
        self.placeholder.setObjectName("placeholder")
        self.body = QWidget()
        self._stack.addWidget(self.body)
        self._stack.addWidget(self.placeholder)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addLayout(self._stack)
        session.result_changed.connect(self._on_result)
        session.selection_changed.connect(self._on_selection)

    # -- subclass API --------------------------------------------------------
    def reason(self) -> str | None:
        """Why this view has nothing to show for the current result (None = it applies)."""
        if self.session.result is None:
            return "Open a model (File ▸ Open, or drop an .onnx file here) and run an input."
        if not self.session.blocks:
            return "This result has no attention maps."
        return None

    def draw(self) -> None:
        raise NotImplementedError

    def on_result(self) -> None:
        """A new result arrived (rebuild structure); draw() follows."""

    # -- plumbing --------------------------------------------------------------
    @property
    def message(self) -> str:
        return self.placeholder.text() if self._stack.currentWidget() is self.placeholder else ""

    def _on_result(self) -> None:
        self._result_pending = True
        self._on_selection()

    def _on_selection(self) -> None:
        if self.isVisible():
            self.refresh()
        else:
            self._dirty = True

    def showEvent(self, event):
        super().showEvent(event)
        if self._dirty:
            self.refresh()

    def refresh(self) -> None:
        self._dirty = False
        why = self.reason()
        if why:
            self.placeholder.setText(why)
            self._stack.setCurrentWidget(self.placeholder)
            return
        if getattr(self, "_result_pending", True):
            self._result_pending = False
            self.on_result()
        try:
            self.draw()
        except (ValueError, AttnvizError) as e:  # an undefined combination, e.g. rollout over cross-attention
            self.placeholder.setText(str(e))
            self._stack.setCurrentWidget(self.placeholder)
            return
        self._stack.setCurrentWidget(self.body)

    def export_target(self) -> QWidget:
        """The widget a PNG/SVG/PDF grab of this view renders."""
        return self.body
