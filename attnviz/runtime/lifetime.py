"""Children die with their parent: :func:`die_with_parent`, called first thing in every process attnviz spawns.

A ``kill -9`` of ``attnviz corpus`` (or of the window) gives the parent no chance to stop its children, and a
child busy in onnxruntime never notices its socket closing: the corpus pool's workers and the crash-isolation host
would live on, holding memory and the caller's stderr.  So each child arms two things itself:

- on Linux, a parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGKILL)``): the kernel kills the child when the
  thread that spawned it ends.  Only armed when the parent says it spawned the child from its main thread (a GUI
  worker thread that ends would otherwise take a healthy child with it);
- everywhere, a watchdog: a daemon thread waiting on a pipe (or multiprocessing's parent sentinel) that only the
  parent holds open; its end of file means the parent is gone.

Either way, ``getppid()`` is checked once both are armed, for a parent that died before they were.  Stdlib only:
the isolation child imports this before anything heavy (``worker.py`` runs as a bare script).

The multiprocessing resource tracker needs none of this: it exits by itself once every process holding its pipe
(the parent and the pool workers) is gone (tests/test_hostile_orphans.py checks it).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
ORPHAN_EXIT = 70  # the exit status of a child that found its parent gone

_armed = False


def die_with_parent(
    parent: int, watch: int | None = None, signal_ok: bool = True, on_orphan: Callable[[], None] | None = None
) -> None:
    """Make this process end when process ``parent`` does.

    ``watch``: a descriptor (or Windows handle) that becomes readable when the parent is gone — the read end of a
    pipe whose write end only the parent holds, or ``multiprocessing.parent_process().sentinel``.
    ``signal_ok``: the parent spawned this process from its main thread, so the Linux parent-death signal fires
    at the right time.  ``on_orphan``: cleanup before exiting (e.g. removing a shared-memory folder); not run when
    the kernel's signal kills the process.  Calling it again in the same process does nothing.
    """
    global _armed
    if _armed:
        return
    _armed = True
    if signal_ok and sys.platform.startswith("linux"):
        _parent_death_signal()
    if watch is not None:
        threading.Thread(target=_watch, args=(watch, on_orphan), name="attnviz-parent-watch", daemon=True).start()
    if os.getppid() != parent:  # gone before the signal or the watch was armed: this process is already orphaned
        _orphaned(on_orphan)


def _parent_death_signal() -> None:
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # no prctl (a libc without it): the watchdog still stands
        pass


def _watch(watch: int, on_orphan: Callable[[], None] | None) -> None:
    from multiprocessing.connection import wait

    try:
        wait([watch])  # readable only at end of file: nothing is ever written to it
    except (OSError, ValueError):
        pass
    _orphaned(on_orphan)


def _orphaned(on_orphan: Callable[[], None] | None) -> None:
    try:
        if on_orphan is not None:
            on_orphan()
    finally:
        os._exit(ORPHAN_EXIT)


def lifeline() -> tuple[int, int]:
    """``(read_end, write_end)`` for a child's watchdog (:func:`die_with_parent`'s ``watch``): pass the read end to
    the child, keep the write end open for as long as the child may live, close it after the child is stopped."""
    return os.pipe()  # both ends non-inheritable: only the child the read end is passed to gets it
