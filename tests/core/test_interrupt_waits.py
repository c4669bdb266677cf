"""A Ctrl-C that the kernel hands to a thread other than the main one (a pool's manager thread, a daemon import) is
raised in the main thread at once by core.interrupts' wait, not once the awaited batch is back.

The signal is sent to a helper thread (``pthread_kill``): Python's C handler runs there and only sets its flag, as
when the kernel picks that thread for a process-directed SIGINT.  A plain ``Future.result()`` then sleeps on until
the future is done (the helper completes it after ``GIVE_UP_S``, so a regression fails instead of hanging)."""

from __future__ import annotations

import signal
import sys
import threading
from concurrent.futures import Future

import pytest

from attnviz.core.interrupts import result_of

GIVE_UP_S = 20.0  # when the helper ends the wait itself: a wait that ignored the signal returns only then

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pthread_kill is POSIX")


class _Stopped(Exception):
    pass


def _raise_stopped(signum, frame):
    raise _Stopped()


# where a thread blocks on a lock: a Future's (and an Event's) wait, a thread's join
_BLOCKING = {threading.Condition.wait.__code__, threading.Thread._wait_for_tstate_lock.__code__}


def _chain(frame) -> list:
    codes = []
    while frame is not None:
        codes.append(frame.f_code)
        frame = frame.f_back
    return codes


def _until_main_waits() -> None:
    """Until the main thread blocks in the wait under test (a signal before it would be run at its next bytecode;
    not the wait of Thread.start for this helper)."""
    main = threading.main_thread().ident
    polled = threading.Event()  # (never set: its timed wait is the polling interval, bounded by GIVE_UP_S)
    for _ in range(int(GIVE_UP_S / 0.005)):
        codes = _chain(sys._current_frames().get(main))
        if codes and codes[0] in _BLOCKING and threading.Thread.start.__code__ not in codes:
            return
        polled.wait(0.005)


def _signalled_from_another_thread(finish) -> tuple[threading.Thread, threading.Event]:
    """A thread that sends itself SIGINT once the main thread waits, then waits for the main thread's catch (or GIVE_UP_S) and calls
    ``finish``, which ends the main thread's wait."""
    caught = threading.Event()

    def helper():
        _until_main_waits()
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        caught.wait(GIVE_UP_S)
        finish()

    t = threading.Thread(target=helper, daemon=True)
    return t, caught


@pytest.fixture
def stopped_on_sigint():
    previous = signal.signal(signal.SIGINT, _raise_stopped)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_result_of_raises_a_ctrl_c_received_by_another_thread_before_the_future_is_done(stopped_on_sigint):
    future: Future[int] = Future()
    helper, caught = _signalled_from_another_thread(lambda: future.done() or future.set_result(1))
    helper.start()
    try:
        with pytest.raises(_Stopped):
            result_of(future)
        assert not future.done()  # raised while the wait was still on, not after it
    finally:
        caught.set()
        helper.join(GIVE_UP_S + 5)


def test_result_of_returns_the_result_and_raises_the_error():
    done: Future[str] = Future()
    done.set_result("ok")
    failed: Future[str] = Future()
    failed.set_exception(ValueError("bad batch"))
    assert result_of(done) == "ok"
    with pytest.raises(ValueError, match="bad batch"):
        result_of(failed)
