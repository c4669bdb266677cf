"""``--screenshot``: save the window once the first result is drawn, then quit.

A refused run (bad input, a flag out of range) saves nothing: the command says its one line and exits 2, as every
other command leaves its ``--out`` alone when it refuses.  Saving the window "for the record" overwrote a good
screenshot from an earlier run at that path with a picture whose only sign of the error was the status bar (a
``--layer`` out of range drew the last layer's overview), and a script that checks for the file took it for success."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from attnviz.gui.export import export_widget

TIMEOUT_MS = 120_000
# a view still computing what it shows (Head stats' worker) is polled this often, at most this many times, before
# the shot: `--view stats --screenshot` saved "computing head statistics…" over an empty table
BUSY_POLL_MS = 100
BUSY_WAITS = 600


def _quit() -> None:
    app = QApplication.instance()
    if app is not None:  # already gone (the window closed first): nothing left to stop
        app.quit()


class ScreenshotTaker:
    def __init__(self, window, path: Path, view: str | None = None):
        self.window = window
        self.path = path
        self.view = view  # the --view asked for: one that has nothing to show for the result is refused, as in figure
        self.error: str | None = None
        self._waits = 0  # polls of a busy view (Head stats computing) before the shot
        window.result_shown.connect(self._soon)
        window.error_shown.connect(self._on_error)
        # a speech model opened without --audio waits for a sound: say so now, not "no result within 120 s" later
        needed = getattr(window, "input_needed", None)
        if needed is not None:
            needed.connect(lambda text: self._on_error(f"{text}; or give one with --audio FILE"))
        corpus = getattr(window, "corpus_shown", None)
        if corpus is not None:  # `attnviz open RESULTS_DIR`: the corpus view is its own window; shoot that one
            corpus.connect(self._soon_corpus)
        QTimer.singleShot(TIMEOUT_MS, lambda: self.fail_later("no result within 120 s"))

    def _soon(self) -> None:
        QTimer.singleShot(400, self._take)  # let the views lay out and paint

    def _soon_corpus(self, view) -> None:
        view.resize(self.window.size())
        QTimer.singleShot(400, lambda: self._take(view))

    def _take(self, widget=None) -> None:
        if self.error is not None:  # refused after the result was shown (--layer out of range): nothing to save
            _quit()
            return
        view = self.window.current_view() if widget is None and hasattr(self.window, "current_view") else None
        if getattr(view, "busy", False) and self._waits < BUSY_WAITS:  # Head stats computing: its table is empty
            self._waits += 1
            QTimer.singleShot(BUSY_POLL_MS, self._take)
            return
        reason = getattr(view, "reason", None) if self.view and widget is None else None
        why = reason() if reason is not None else None
        if why:
            # `--view alignment` of an encoder saved the view's "Alignment needs cross-attention" and exit 0, where
            # `figure --view alignment` refuses: the picture asked for is not there, so nothing is saved
            self.error = f"--view {self.view}: {why}"
            _quit()
            return
        try:
            export_widget(widget if widget is not None else self.window, self.path)
        except Exception as e:
            self.error = f"could not save the screenshot {self.path}: {e}"
        _quit()

    def _on_error(self, text: str) -> None:
        self.error = text
        QTimer.singleShot(0, _quit)

    def fail_later(self, text: str) -> None:
        self.error = self.error or text
        QTimer.singleShot(0, _quit)
