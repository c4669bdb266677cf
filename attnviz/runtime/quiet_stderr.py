"""The one redirection of stderr (fd 2) to /dev/null, shared by every thread: a Rust panic inside ``tokenizers``
prints a multi-line report (a backtrace under RUST_BACKTRACE) that the caller turns into one line of its own
(runtime/inputs.py).  A process spawned while it is in force would inherit /dev/null as its stderr for life, so
:func:`terminal` gives a spawn the terminal's (runtime/child.py: the crash-isolation child)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _Quiet:
    """The one redirection of stderr (fd 2) to /dev/null that the threads inside a :class:`muted` share: the
    first in saves the terminal's, the last out puts it back (each thread saving and restoring its own would leave
    /dev/null there when two overlap)."""

    lock = threading.Lock()
    depth = 0
    saved: int | None = None
    devnull: int | None = None  # opened once and kept: two system calls fewer on every encode (~2 µs of ~7)


class muted:
    """Keep a Rust panic's multi-line report (its message and a backtrace under RUST_BACKTRACE) off the terminal:
    the caller turns the panic into one line.  On any thread by default: the window's worker encodes its text (a
    panic's report would otherwise print under ``attnviz open`` beside the window's one message); the other threads'
    own writes to stderr go nowhere for those milliseconds.  ``any_thread=False``: the main thread only (a corpus's
    batched encode, long enough that another thread's progress line would be lost)."""

    def __init__(self, any_thread: bool = True):
        self.any_thread = any_thread
        self._on = False

    def __enter__(self):
        if not (self.any_thread or threading.current_thread() is threading.main_thread()):
            return self
        with _Quiet.lock:
            if _Quiet.depth == 0:
                try:
                    if _Quiet.devnull is None:
                        _Quiet.devnull = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
                    _Quiet.saved = os.dup(2)
                    os.dup2(_Quiet.devnull, 2)
                except OSError:
                    if _Quiet.saved is not None:
                        os.close(_Quiet.saved)
                    _Quiet.saved = None
                    return self
            _Quiet.depth += 1
            self._on = True
        return self

    def __exit__(self, *exc):
        if self._on:
            with _Quiet.lock:
                _Quiet.depth -= 1
                if _Quiet.depth == 0 and _Quiet.saved is not None:
                    os.dup2(_Quiet.saved, 2)
                    os.close(_Quiet.saved)
                    _Quiet.saved = None
            self._on = False
        return False


@contextmanager
def terminal() -> Iterator[int | None]:
    """For a process spawned inside it: the terminal's stderr where a :class:`muted` span is in force on another
    thread (give it as the spawn's stderr), else None (inherit fd 2).  Holds the redirection as it is until the
    spawn returns: no thread mutes or unmutes meanwhile."""
    with _Quiet.lock:
        yield _Quiet.saved if _Quiet.depth else None
