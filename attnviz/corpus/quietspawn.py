"""A ``spawn`` multiprocessing context whose processes are quiet on Ctrl-C from the moment they exist.

A terminal's Ctrl-C reaches the whole process group; a pool process ignores SIGINT only once its initializer runs
(engines._enter_worker), after its interpreter started and unpickled (imported) the initializer's module — seconds
on a busy box, during which a Ctrl-C printed a ``KeyboardInterrupt`` traceback from each process starting.  Here the
starting thread blocks SIGINT while it spawns: the child inherits the blocked mask through fork and exec (a signal
sent meanwhile stays pending there, not delivered), and its initializer ignores SIGINT before it unblocks it
(:func:`settle`).  The driver loses nothing: a signal to the process goes to a thread that does not block it, or
waits in the starting thread until the spawn returns (a few ms).  (Another thread's signal is still raised in the
main thread mid-spawn, as Python runs its handlers there: the pool holds it until the process is recorded,
corpus/quietpool.py.)"""

from __future__ import annotations

import signal
from multiprocessing import resource_tracker
from multiprocessing.context import SpawnContext, SpawnProcess


class QuietSpawnProcess(SpawnProcess):
    def start(self) -> None:
        # the resource tracker's own start unblocks SIGINT in this thread (multiprocessing.resource_tracker): first
        resource_tracker.ensure_running()
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            super().start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class QuietSpawnContext(SpawnContext):
    Process = QuietSpawnProcess


def context() -> QuietSpawnContext:
    """The context for ``ProcessPoolExecutor(mp_context=...)``; its initializer calls :func:`settle` first."""
    return QuietSpawnContext()


def settle() -> None:
    """In a process spawned by :func:`context`: Ctrl-C ignored (the driver's to handle), then unblocked, which
    discards one that arrived while the process was starting."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
