"""File ▸ Compare with…: a second model (B) beside the open one (A), wired to the Qt-free jobs of
:mod:`attnviz.app.compare`.  B runs A's last request in a worker; the session holds the comparison until A's
result changes, when B runs the new input (or, if it cannot, is dropped with a line in the status bar)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtWidgets import QFileDialog, QLabel

from attnviz.app.compare import HeldComparison, compare_with, open_and_compare
from attnviz.gui.workers import error_text
from attnviz.runtime.errors import Cancelled

if TYPE_CHECKING:
    from attnviz.runtime.protocol import AttnModel
    from attnviz.runtime.request import AnalyzeRequest


class CompareController:
    """The window's comparison: menu actions, the status-bar indicator naming B, and the compare jobs."""

    def __init__(self, window: Any):  # the MainWindow (not imported: main_window imports this module)
        self.w = window
        self.model_b: AttnModel | None = None  # kept to run each new input of A
        self.path_b: Path | None = None
        self.indicator = QLabel("")
        self.indicator.setObjectName("compare_indicator")
        self.indicator.hide()
        window.statusBar().addPermanentWidget(self.indicator)
        self.stop_action = window._action("Stop c&omparing", self.stop)
        self.stop_action.setEnabled(False)
        window.session.comparison_changed.connect(self._show_indicator)

    def actions(self):
        return [
            self.w._action("Compare &with… (a second model)", self.dialog),
            self.w._action("Compare with model fo&lder… (optimum export)", self.folder_dialog),
            self.stop_action,
        ]

    def dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.w, "Compare with model", "", "ONNX models (*.onnx);;All files (*)")
        if path:
            self.compare_with(path)

    def folder_dialog(self) -> None:
        # a file dialog cannot pick a folder, and an export folder (encoder + decoder files, a Hub repository's
        # variants) is one model only as a folder: `attnviz compare A FOLDER` takes it, so the window does too
        path = QFileDialog.getExistingDirectory(self.w, "Compare with model folder")
        if path:
            self.compare_with(path)

    def compare_with(self, path) -> None:
        """Open ``path`` as model B and compare it with A on A's last request."""
        w = self.w
        if w.session.result is None:
            w.show_error("nothing to compare yet: open a model and run an input first, then File ▸ Compare with…")
            return
        tokenizer = str(w.tokenizer) if w.tokenizer else None
        self._start(
            open_and_compare, w.opener, str(path), w.last_request, w.session.result, w.provider, tokenizer, first=True
        )
        w.statusBar().showMessage(f"Comparing with {Path(path).name}…")

    def on_result(self, request: AnalyzeRequest | None) -> None:
        """A's result changed (new input or new model A): B runs it too, or the comparison ends."""
        if self.model_b is None or self.path_b is None:
            return
        self._start(compare_with, self.model_b, self.path_b, request, self.w.session.result, first=False)
        self._show_indicator()

    def _start(self, fn, *args, first: bool) -> None:
        w = self.w
        w.workers.cancel("compare")
        job = w.workers.start(fn, *args, kind="compare")
        w._latest["compare"] = job.request_id
        w._context[job.request_id] = (first,)

    def returned(self, rid: int, held: HeldComparison) -> None:
        w = self.w
        if rid != w._latest["compare"]:
            return
        if held.result_a is not w.session.result:
            return  # A moved on meanwhile; its own recompute is under way
        self.model_b, self.path_b = held.model_b, held.path_b
        w.session.set_comparison(held)
        self.stop_action.setEnabled(True)
        w.statusBar().showMessage(held.status())

    def errored(self, rid: int, exc: BaseException) -> None:
        w = self.w
        if rid != w._latest["compare"] or isinstance(exc, Cancelled):
            return
        first = w._context.get(rid, (True,))[0]
        if first:  # File ▸ Compare with…: one message; whatever was compared before stays
            w.show_error(error_text(exc), param=getattr(exc, "param", None))
            return
        name = self.model_b.name if self.model_b is not None and self.model_b.name else "B"
        self.stop(quiet=True)
        w.statusBar().showMessage(f"Comparison with {name} dropped: {error_text(exc)}")

    def stop(self, quiet: bool = False) -> None:
        """End the comparison: B is closed, the comparison columns and views go."""
        name = self.indicator_name()
        self.model_b, self.path_b = None, None
        self.w.workers.cancel("compare")
        self.w._latest["compare"] = -1
        self.w.session.set_comparison(None)
        self.stop_action.setEnabled(False)
        self._show_indicator()
        if not quiet and name:
            self.w.statusBar().showMessage(f"Stopped comparing with {name}")

    def indicator_name(self) -> str:
        c = self.w.session.comparison
        return c.name_b if c is not None else ""

    def _show_indicator(self) -> None:
        name = self.indicator_name()
        if not name and self.model_b is not None:  # B is running A's new input
            name = f"{self.model_b.name or 'B'} (running…)"
        self.indicator.setText(f"compare: A vs B = {name}" if name else "")
        self.indicator.setToolTip(str(self.path_b) if name and self.path_b else "")
        self.indicator.setVisible(bool(name))
