"""A Ctrl-C held back over a short block that must finish whole: a pool recording the process it just spawned
(corpus/quietpool.py), several output files published together (core/writes.py's :func:`atomic_paths`)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any


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
