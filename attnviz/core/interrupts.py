"""A Ctrl-C held back over a short block that must finish whole: a pool recording the process it just spawned
(corpus/quietpool.py), several output files published together (core/writes.py's :func:`atomic_paths`)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def held() -> Iterator[None]:
    """A Ctrl-C meanwhile is raised when the block ends, by the handler it would have run (the command's counting
    one, or Python's own); only in the main thread, where Python runs the handlers, and only where a Python handler
    is set (an ignored SIGINT stays ignored).  Not for a block that may wait long: a second Ctrl-C is held too."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler):
        yield
        return
    caught: list = []
    signal.signal(signal.SIGINT, lambda *signal_and_frame: caught.append(signal_and_frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)
        if caught:
            handler(*caught[0])
