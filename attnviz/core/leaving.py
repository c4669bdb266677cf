"""Whether this process ends through ``os._exit`` once its command returns (``attnviz.cli._leave_at_once``: the
console script and ``python -m attnviz`` running a command that declares ``LEAVES_AT_ONCE``).

Such a process skips the interpreter's teardown, so a daemon thread still working then (the corpus driver's
pyarrow import, ``corpus/run.py``) is simply ended with it: a Ctrl-C need not wait for that thread.  A library
caller's process (or a test's) tears the interpreter down, and a daemon thread importing while it does may crash
it: there the thread is joined first."""

from __future__ import annotations

import threading

_at_once = False
# name prefixes of non-daemon threads that such an exit may end mid-way (:func:`ends_with_process`)
_CUT_SHORT: set[str] = set()


def set_leaves_at_once(value: bool) -> None:
    global _at_once
    _at_once = bool(value)


def leaves_at_once() -> bool:
    return _at_once


def ends_with_process(prefix: str) -> None:
    """Threads named ``prefix...`` compute what only this process reads (the overview's pooling threads): an exit
    through ``os._exit`` may end them mid-way.  concurrent.futures' workers are not daemon threads, so one alive
    (busy, or idle in its pool) kept the process from leaving at once, and the interpreter's exit then waited for
    the heads in progress: a Ctrl-C of ``attnviz figure`` waited for them (seconds with kept mass, long inputs)."""
    _CUT_SHORT.add(prefix)


def holds_exit(thread: threading.Thread) -> bool:
    """Whether ``thread`` keeps the process from leaving at once (``attnviz.cli._leave_at_once``): a non-daemon
    thread still running, unless it is one that :func:`ends_with_process` named."""
    return not thread.daemon and thread.is_alive() and not thread.name.startswith(tuple(_CUT_SHORT))
