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
        # CPython's guard against quadratic cost (Modules/gcmodule.c, long_lived_total / long_lived_pending, which
        # it does not expose): a full collection traverses every object, so it waits until the objects that reached
        # the oldest generation since the last one are a quarter of those that one kept.  Without it a full pass
        # ran every tenth generation-1 pass: seconds each in a heap of millions (the test suite's process)
        self.long_lived_total = len(gc.get_objects(generation=2))
        self.long_lived_pending = 0
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.collect_due)
        self.timer.start(interval_ms)

    def collect_due(self) -> None:
        """Collect the generation CPython itself would have collected now, if any."""
        t0, t1, t2 = self.thresholds
        c0, c1, c2 = gc.get_count()
        if t0 <= 0 or c0 <= t0:
            return
        if c2 > t2 and self.long_lived_pending >= self.long_lived_total // 4:
            gc.collect(2)
            self.long_lived_total = len(gc.get_objects(generation=2))  # what it kept (the rest are now there too)
            self.long_lived_pending = 0
        elif c1 > t1:
            young = len(gc.get_objects(generation=0)) + len(gc.get_objects(generation=1))
            self.long_lived_pending += young - gc.collect(1)  # the survivors move to the oldest generation
        else:
            gc.collect(0)


def install(app: QObject) -> MainThreadCollector:
    """The collector for ``app`` (made once, in the GUI thread, parented to the application)."""
    if not _INSTALLED:
        _INSTALLED.append(MainThreadCollector(app))
    return _INSTALLED[0]


def collect_due() -> None:
    """Run the installed collector's check now (the test suite calls it between tests); nothing when none."""
    if _INSTALLED:
        _INSTALLED[0].collect_due()
