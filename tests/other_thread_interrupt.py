"""A Ctrl-C that the kernel hands to a thread other than the main one, for tests of the main thread's waits.

The signal is sent to a helper thread (``pthread_kill``): Python's C handler runs there and only sets its flag, as
when the kernel picks that thread for a process-directed SIGINT.  A wait of the main thread that does not wake by
itself then sleeps on until what it waits for is done; the helper ends it after ``GIVE_UP_S`` (``finish``), so a
regression fails instead of hanging."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from types import CodeType

GIVE_UP_S = 20.0  # when the helper ends the wait itself: a wait that ignored the signal returns only then

# where a thread blocks on a lock: a Future's (and an Event's) wait, a thread's join
BLOCKING = frozenset({threading.Condition.wait.__code__, threading.Thread._wait_for_tstate_lock.__code__})


def _chain(frame) -> list:
    codes = []
    while frame is not None:
        codes.append(frame.f_code)
        frame = frame.f_back
    return codes


def until_main_waits(blocking: Collection[CodeType] = BLOCKING) -> None:
    """Until the main thread blocks in the wait under test (its innermost frame one of ``blocking``; a signal
    before it would be run at its next bytecode), not in the wait of Thread.start for this helper."""
    main = threading.main_thread().ident
    polled = threading.Event()  # (never set: its timed wait is the polling interval, bounded by GIVE_UP_S)
    for _ in range(int(GIVE_UP_S / 0.005)):
        codes = _chain(sys._current_frames().get(main))
        if codes and codes[0] in blocking and threading.Thread.start.__code__ not in codes:
            return
        polled.wait(0.005)


def signalled_from_another_thread(
    finish: Callable[[], object], blocking: Collection[CodeType] = BLOCKING
) -> tuple[threading.Thread, threading.Event]:
    """A thread (not started) that sends itself SIGINT once the main thread waits, then waits for the main
    thread's catch (``caught`` set, or GIVE_UP_S) and calls ``finish``, which ends the main thread's wait."""
    caught = threading.Event()

    def helper():
        until_main_waits(blocking)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        caught.wait(GIVE_UP_S)
        finish()

    t = threading.Thread(target=helper, daemon=True)
    return t, caught


class Stopped(Exception):
    """What SIGINT raises in the main thread under :func:`sigint_raises_stopped` (not a KeyboardInterrupt, which
    would stop pytest itself)."""


def _raise_stopped(signum, frame):
    raise Stopped()


@contextmanager
def sigint_raises_stopped() -> Iterator[None]:
    previous = signal.signal(signal.SIGINT, _raise_stopped)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
