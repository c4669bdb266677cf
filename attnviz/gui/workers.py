"""Background work on a QThreadPool: QRunnable workers with QObject signals.

A QRunnable is not a QObject, so each :class:`Worker` owns a :class:`WorkerSignals`
(the superqt pattern).  The callable runs off the GUI thread and must not touch widgets;
it may accept ``progress`` (``progress(percent, text)``) and ``cancelled`` (``cancelled() -> bool``)
keyword arguments, which are passed only when its signature names them.

A pool's ``wording`` (:mod:`attnviz.core.setting_words`) is how its jobs' refusals and notes name their fixes: the
window's pool names its fields (:data:`attnviz.app.fields.WINDOW`), never a flag it has no place for.

Every worker carries a ``request_id``; the window drops results whose id is not the newest
(latest request wins).  Cancelling a worker really stops onnxruntime: the callable runs inside
:func:`attnviz.runtime.host.cancel_scope`, so a remote run in progress kills the child process.
A cancelled worker that is still busy in Python no longer counts against the pool's size, so a
stuck job never blocks the next open.

Signals
-------
progress(int, int, str) request id, percent (0-100, -1 = unknown) and a short text
returned(int, object)   request id and the callable's return value
errored(int, object)    request id and the exception
finished(int)           request id, always last
"""

from __future__ import annotations

import contextlib
import inspect
import threading
import traceback
from collections.abc import Mapping

from PySide6.QtCore import QObject, QRunnable, Qt, QThreadPool, Signal, Slot

from attnviz.core.setting_words import Wording, worded
from attnviz.runtime.errors import Cancelled  # the one cancellation type: a progress call raises it here too


class WorkerSignals(QObject):
    progress = Signal(int, int, str)
    returned = Signal(int, object)
    errored = Signal(int, object)
    finished = Signal(int)


class Worker(QRunnable):
    def __init__(self, fn, *args, request_id: int = 0, kind: str = "", words: Wording | None = None, **kwargs):
        super().__init__()
        self.words = words  # None: the words of whoever runs the callable (the command line's flags)
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.request_id = request_id
        self.kind = kind
        self.signals = WorkerSignals()
        self._cancel = threading.Event()
        self.setAutoDelete(False)  # the window keeps a reference until `finished`
        params: Mapping[str, inspect.Parameter]
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):  # a builtin without a signature takes neither keyword
            params = {}
        if "progress" in params:
            self.kwargs["progress"] = self._progress
        if "cancelled" in params:
            self.kwargs["cancelled"] = self._cancel.is_set

    def cancel(self) -> None:
        self._cancel.set()

    @property
    def is_cancelled(self) -> bool:
        return self._cancel.is_set()

    def _progress(self, percent: int, text: str = "") -> None:
        if self._cancel.is_set():
            raise Cancelled("cancelled")
        _tell(self.signals.progress, self.request_id, int(percent), str(text))

    def run(self) -> None:  # called on a pool thread
        from attnviz.runtime.host import cancel_scope

        rid = self.request_id
        words = worded(self.words) if self.words is not None else contextlib.nullcontext()
        try:
            with cancel_scope(self._cancel.is_set), words:
                out = self.fn(*self.args, **self.kwargs)
        except BaseException as e:
            # the window prints this under ATTNVIZ_DEBUG=1 after the exception crossed threads, where
            # format_exc() no longer can; an ad-hoc attribute on a foreign exception, which typeshed has no slot for
            e.__attnviz_traceback__ = traceback.format_exc()  # type: ignore[attr-defined]
            _tell(self.signals.errored, rid, e)
        else:
            _tell(self.signals.returned, rid, out)
        finally:
            _tell(self.signals.finished, rid)


def _tell(signal, *args) -> None:
    """Emit ``signal`` unless its window is gone: a job still running when the window closed (it waits 5 s for
    them; the head statistics of a 4,096-token map kept per head take longer) found its signals deleted, and Qt
    printed the RuntimeError's traceback on the terminal as the process ended.  Nobody is left to tell."""
    try:
        signal.emit(*args)
    except RuntimeError as e:
        if "deleted" not in str(e):
            raise


class WorkerPool(QObject):
    """Starts workers, keeps them alive until finished, hands out request ids, and relays
    every worker's signals on the GUI thread (its own slots are queued there) tagged with the kind.

    Signals
    -------
    progress(str, int, int, str)   kind, request id, percent, text
    returned(str, int, object)     kind, request id, value
    errored(str, int, object)      kind, request id, exception
    finished(str, int)             kind, request id
    """

    progress = Signal(str, int, int, str)
    returned = Signal(str, int, object)
    errored = Signal(str, int, object)
    finished = Signal(str, int)

    def __init__(self, max_threads: int = 2, parent=None):
        super().__init__(parent)
        self.pool = QThreadPool()
        self.pool.setMaxThreadCount(max_threads)
        self.max_threads = max_threads
        self._live: dict[int, Worker] = {}
        self._next = 0
        self.wording: Wording | None = None  # how its jobs' messages name their fixes (None: the flags)

    def new_id(self) -> int:
        self._next += 1
        return self._next

    def start(self, fn, *args, kind: str = "", request_id: int | None = None, **kwargs) -> Worker:
        rid = self.new_id() if request_id is None else request_id
        w = Worker(fn, *args, request_id=rid, kind=kind, words=self.wording, **kwargs)
        self._live[rid] = w
        w.signals.progress.connect(self._on_progress, Qt.ConnectionType.QueuedConnection)
        w.signals.returned.connect(self._on_returned, Qt.ConnectionType.QueuedConnection)
        w.signals.errored.connect(self._on_errored, Qt.ConnectionType.QueuedConnection)
        w.signals.finished.connect(self._on_finished, Qt.ConnectionType.QueuedConnection)
        self.pool.start(w)
        return w

    def _kind(self, rid: int) -> str:
        w = self._live.get(rid)
        return w.kind if w is not None else ""

    @Slot(int, int, str)
    def _on_progress(self, rid, p, t):
        self.progress.emit(self._kind(rid), rid, p, t)

    @Slot(int, object)
    def _on_returned(self, rid, value):
        self.returned.emit(self._kind(rid), rid, value)

    @Slot(int, object)
    def _on_errored(self, rid, exc):
        self.errored.emit(self._kind(rid), rid, exc)

    @Slot(int)
    def _on_finished(self, rid):
        kind = self._kind(rid)
        self._live.pop(rid, None)
        self._resize()
        self.finished.emit(kind, rid)

    def live(self, kind: str | None = None) -> list[Worker]:
        return [w for w in self._live.values() if kind is None or w.kind == kind]

    def cancel(self, kind: str | None = None) -> None:
        for w in self.live(kind):
            w.cancel()
        self._resize()

    def _resize(self) -> None:
        """Cancelled workers still running hold a thread each: add that many so new work starts at once."""
        stuck = sum(1 for w in self._live.values() if w.is_cancelled)
        self.pool.setMaxThreadCount(self.max_threads + stuck)

    def wait(self, msecs: int = 30000) -> bool:
        return self.pool.waitForDone(msecs)


def error_text(e: BaseException) -> str:
    """One readable line for any exception (AttnvizError already is one)."""
    from attnviz import AttnvizError

    if isinstance(e, Cancelled):
        return "cancelled"
    if isinstance(e, AttnvizError):
        return " ".join(str(e).split())  # one line in the window too
    msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
    if isinstance(e, MemoryError):
        return "out of memory; use a shorter input"
    # not a message attnviz wrote for the user: a bug; say so, and where the details are
    return f"internal error ({type(e).__name__}{': ' + msg if msg else ''}); set ATTNVIZ_DEBUG=1 to print the traceback"
