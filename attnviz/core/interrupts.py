"""A Ctrl-C held back over a short block that must finish whole: a pool recording the process it just spawned
(corpus/quietpool.py), several output files published together (core/writes.py's :func:`atomic_paths`); and
a wait that a Ctrl-C interrupts at once (:func:`result_of`, and :func:`in_thread` for a thread's work)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from concurrent.futures import Future


T = TypeVar("T")


class Terminated(KeyboardInterrupt):
    """A SIGTERM (``kill PID``, a scheduler's or ``timeout``'s stop) raised as a Ctrl-C is, so a command stops the
    same way: its pool's workers stopped and joined, its semaphores released, no partial output published.  Python's
    default for SIGTERM is to die on the spot, and a corpus run's resource tracker then printed "There appear to be 5
    leaked semaphore objects" on the user's terminal."""


TERMINATED_EXIT = 128 + signal.SIGTERM  # what a shell reports for a process SIGTERM ended


_seen: list[int] = []  # the SIGTERMs raised since terminate_as_interrupt (one inside an import is told as itself)


def raise_terminated(signum: int, frame: FrameType | None) -> None:
    _seen.append(signum)
    raise Terminated()


def terminated() -> bool:
    """Whether a SIGTERM was raised since :func:`terminate_as_interrupt`: one that lands while a C extension
    initialises (numpy, pyarrow) comes out as that import's ImportError, which is then told as the stop it was."""
    return bool(_seen)


def terminate_as_interrupt() -> Any:
    """From here SIGTERM raises :class:`Terminated` in the main thread; returns the handler to restore (None where
    nothing was set: off the main thread, or SIGTERM already ignored or handled by a caller)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return None
    _seen.clear()
    return signal.signal(signal.SIGTERM, raise_terminated)


@contextmanager
def sigterm_kept() -> Iterator[None]:
    """A library started in the block (``ray.init``: its driver's handler exits with code 15 and no word) does not
    take SIGTERM from a command that raises it as a stop: attnviz's handler is put back after the block."""
    mine = (
        threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is raise_terminated
    )
    try:
        yield
    finally:
        if mine and signal.getsignal(signal.SIGTERM) is not raise_terminated:
            signal.signal(signal.SIGTERM, raise_terminated)


_HELD = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def held() -> Iterator[None]:
    """A Ctrl-C (or a SIGTERM the command raises as one) meanwhile is raised when the block ends, by the handler it
    would have run (the command's counting one, or Python's own); only in the main thread, where Python runs the
    handlers, and only where a Python handler is set (an ignored SIGINT stays ignored, a SIGTERM left at its default
    still ends the process).  Not for a block that may wait long: a second Ctrl-C is held too."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handlers: dict[signal.Signals, Callable[[int, FrameType | None], Any]] = {}
    for held_sig in _HELD:
        h = signal.getsignal(held_sig)
        if callable(h):
            handlers[held_sig] = h
    if not handlers:
        yield
        return
    caught: list = []
    for held_sig in handlers:
        signal.signal(held_sig, lambda *signal_and_frame: caught.append(signal_and_frame))
    try:
        yield
    finally:
        for held_sig, h in handlers.items():
            signal.signal(held_sig, h)
        if caught:
            handlers[signal.Signals(caught[0][0])](*caught[0])


# A Ctrl-C that the kernel hands to another of the driver's threads (a pool's manager or feeder thread, a daemon
# thread importing pyarrow) only sets Python's flag: a main thread blocked on a lock for a whole batch (a
# Future's result) ran the handler when that batch came back, and the Ctrl-C waited for it (3.5 s measured, the
# workers running on meanwhile).  Waits in slices of this many seconds run it within one slice instead.
WAKE_S = 0.05


def result_of(future: Future[T]) -> T:
    """``future.result()``, waited for in slices of :data:`WAKE_S` so that a Ctrl-C meanwhile is raised at once.
    (A thread's own end is not waited for this way: a ``Thread.join`` interrupted by a Ctrl-C marks a thread that
    still runs as stopped, CPython 3.11's bpo-45274 clean-up; a Future that the thread completes is.)"""
    while True:
        try:
            return future.result(timeout=WAKE_S)
        except TimeoutError:  # (concurrent.futures.TimeoutError is the builtin since Python 3.11)
            continue


def in_thread(fn: Callable[[], T], name: str) -> Future[T]:
    """``fn()`` on a daemon thread named ``name``; its end is the Future's, for :func:`result_of` (a Ctrl-C
    meanwhile raised at once, where ``Thread.join`` slept on: see :func:`result_of` on why not a join in slices)."""
    from concurrent.futures import Future

    done: Future[T] = Future()

    def run() -> None:
        try:
            done.set_result(fn())
        except BaseException as e:  # raised by result_of, in the waiting thread
            done.set_exception(e)

    threading.Thread(target=run, name=name, daemon=True).start()
    return done
