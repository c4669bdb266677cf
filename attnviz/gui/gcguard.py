"""Python's cyclic garbage collector runs in the GUI thread only.

CPython collects cycles in whichever thread allocates when a generation's threshold is passed.  The window has
threads that run Python (the overview's thumbnail pool, the superqt workers; in the test process also Ray's,
tqdm's monitor), so a collection there could free the last reference to a cycle holding Qt wrappers and delete
Qt objects off the GUI thread.  Qt does not allow that, and the damage shows later and elsewhere: the fresh-clone
suite died in shiboken (``PyType_IsSubtype(NULL, …)`` looking up a stale wrapper while an unrelated plot axis was
laid out, session 14's `.ci/run` stack).  So while the app runs, automatic collection is off and a timer in the
GUI thread collects, generation by generation, as the same thresholds are passed (the scheme calibre uses for
PyQt).  Reference counting still frees everything that is not in a cycle at once, in any thread.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

INTERVAL_MS = 500  # how often the GUI thread looks at the collector's counts (a generation-0 pass is microseconds)

_INSTALLED: list[MainThreadCollector] = []


class MainThreadCollector(QObject):
    """Automatic collection off; :meth:`collect_due` runs from a timer in the thread that made this object."""

    def __init__(self, parent: QObject | None = None, interval_ms: int = INTERVAL_MS) -> None:
        super().__init__(parent)
        self.thresholds = gc.get_threshold()
        gc.disable()
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.collect_due)
        self.timer.start(interval_ms)

    def collect_due(self) -> None:
        """Collect the generations whose counts passed their thresholds, as CPython itself would have."""
        t0, t1, t2 = self.thresholds
        c0, c1, c2 = gc.get_count()
        if t0 <= 0 or c0 <= t0:
            return
        generation = 0
        if c1 > t1:
            generation = 2 if c2 > t2 else 1
        gc.collect(generation)


def install(app: QObject) -> MainThreadCollector:
    """The collector for ``app`` (made once, in the GUI thread, parented to the application)."""
    if not _INSTALLED:
        _INSTALLED.append(MainThreadCollector(app))
    return _INSTALLED[0]


def collect_due() -> None:
    """Run the installed collector's check now (the test suite calls it between tests); nothing when none."""
    if _INSTALLED:
        _INSTALLED[0].collect_due()
