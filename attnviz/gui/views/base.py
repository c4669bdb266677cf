"""Base class of the tabbed views: built the first time they are shown, redrawn from the session only while
visible."""

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

    A view's widgets (plots, pyqtgraph view boxes, tables) are made by :meth:`build` the first time it has
    something to draw, not when the window opens: a window shows one tab, and building all seven made
    ``MainWindow()`` 30 times slower (pyqtgraph's plot and axis items; bench/RESULTS.md, session 19 suite19).
    ``__init__`` holds the state; :meth:`build` the widgets.
    Asking for one of those widgets (``view.heatmap``) before then builds the view first (:meth:`__getattr__`).
    """

    title = "view"
    # None: the view draws on the colour-scale box's and the log box's choice; else why it does not (the window
    # greys both boxes while the view is shown, with this as their tooltip: a box that moves nothing misleads)
    scale_note: str | None = None
    # the selection field the colour-scale box sets while the view is shown: Image regions keeps its own
    # (Selection.image_scale: stretched by default, where the token maps' default is fixed 0–1)
    scale_field = "scale"

    def __init__(self, session, parent=None):
        super().__init__(parent)
        self.session = session
        self._dirty = True
        self._result_pending = True  # on_result() is due before the next draw()
        self._built = False
        self._building = False  # build() is running
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
        session.model_changed.connect(self._on_note)
        session.run_note_changed.connect(self._on_note)

    # -- subclass API --------------------------------------------------------
    def reason(self) -> str | None:
        """Why this view has nothing to show for the current result (None = it applies)."""
        if self.session.result is None:
            if self.session.model is None:
                return "Open a model (File ▸ Open, or drop an .onnx file here) and run an input."
            name = self.session.model.name or "The model"
            return self.session.run_note or f"{name} is open: run an input (Run, or Enter in the text box)."
        if not self.session.blocks:
            return "This result has no attention maps."
        return None

    def build(self) -> None:
        """Make the view's widgets in :attr:`body` (called once, by :meth:`ensure_built`)."""

    def draw(self) -> None:
        raise NotImplementedError

    def on_result(self) -> None:
        """A new result arrived (rebuild structure); draw() follows."""

    # -- building ---------------------------------------------------------------
    @property
    def built(self) -> bool:
        return self._built

    def ensure_built(self) -> None:
        """Build the widgets now, if they are not yet: laid out at the size the view has, as they would have been
        had they been made with the window (the Overview fits its grid to its plot's size).

        A :meth:`build` that raises leaves no half-built view: what it made is dropped (the attributes it set, the
        body it filled, replaced by an empty one), the view counts as unbuilt, so the next :meth:`refresh` or
        widget asked for builds it again, and the error goes on to the caller (:meth:`refresh` shows it)."""
        if self._built:
            return
        before = set(self.__dict__)
        self._building = True  # build() looking up an attribute it has not set yet must not build again
        # built into a hidden body: a visible one shows each widget added at the next turn of the event loop
        # (Qt's queued show), so right after the tab switch that built them they would be hidden, unsized
        hidden = self.body.isHidden()
        self.body.hide()
        try:
            self.build()
        except BaseException:
            self._discard_build(before, hidden)
            raise
        finally:
            self._building = False
        self._built = True
        if self.body.layout() is not None:  # laid out now at the view's size, as with the window (the stack
            self.body.setGeometry(self.rect())  # fills the view, no margins; a stacked layout keeps no rectangle)
            self.body.layout().activate()
        self.body.setHidden(hidden)

    def _discard_build(self, before: set[str], hidden: bool) -> None:
        """Forget what a failed :meth:`build` made: the attributes it set and the body it filled (its widgets and
        layout go with it; an empty body takes its place in the stack)."""
        for name in set(self.__dict__) - before - {"_building"}:
            delattr(self, name)
        old, self.body = self.body, QWidget()
        self.body.setHidden(hidden)
        self._stack.insertWidget(self._stack.indexOf(old), self.body)
        self._stack.removeWidget(old)
        old.setParent(None)  # out of the window's widget tree now; deleted at the next turn of the event loop
        old.deleteLater()

    def __getattr__(self, name: str) -> object:
        """Only for names ordinary lookup does not find: a widget :meth:`build` makes, asked for before the view
        was built (a caller or test reading ``view.table``), builds the view and is then found.  (Typed ``object``,
        not ``Any``: mypy sees build()'s attributes anyway, and a misspelt one stays an error where it is used.)"""
        d = self.__dict__
        if name.startswith("__") or d.get("_built", True) or d.get("_building", False):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.ensure_built()
        return getattr(self, name)

    # -- plumbing --------------------------------------------------------------
    @property
    def message(self) -> str:
        return self.placeholder.text() if self._stack.currentWidget() is self.placeholder else ""

    def _on_result(self) -> None:
        # drawn on the selection_changed that Session.set_result sends right after (its selection already the new
        # result's): drawing here too drew every shown view twice a result, and Token links computed its links
        # twice (1.8 s each at 4,096 tokens on demand, where every map is recomputed by the model)
        self._result_pending = True
        self._dirty = True

    def _on_selection(self) -> None:
        if self.isVisible():
            self.refresh()
        else:
            self._dirty = True

    def _on_note(self) -> None:
        """The model or the latest run's note changed: only the placeholder that stands in for a result says it."""
        if self.session.result is None:
            self._on_selection()

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
        try:
            self.ensure_built()
        except Exception as e:  # (nothing was kept: a later refresh, e.g. the next selection, builds it again)
            self._dirty = True  # shown again, it tries again
            self.placeholder.setText(
                f"This view could not be made: {str(e) or type(e).__name__}. Switch tabs and back to try again."
            )
            self._stack.setCurrentWidget(self.placeholder)
            return
        if self._result_pending:
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
        self.ensure_built()
        return self.body
