"""Whether this process ends through ``os._exit`` once its command returns (``attnviz.cli._leave_at_once``: the
console script and ``python -m attnviz`` running a command that declares ``LEAVES_AT_ONCE``).

Such a process skips the interpreter's teardown, so a daemon thread still working then (the corpus driver's
pyarrow import, ``corpus/run.py``) is simply ended with it: a Ctrl-C need not wait for that thread.  A library
caller's process (or a test's) tears the interpreter down, and a daemon thread importing while it does may crash
it: there the thread is joined first."""

from __future__ import annotations

_at_once = False


def set_leaves_at_once(value: bool) -> None:
    global _at_once
    _at_once = bool(value)


def leaves_at_once() -> bool:
    return _at_once
