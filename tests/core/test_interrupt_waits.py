"""A Ctrl-C that the kernel hands to a thread other than the main one (a pool's manager thread, a daemon import) is
raised in the main thread at once by core.interrupts' wait, not once the awaited batch is back.

The signal is sent to a helper thread (tests/other_thread_interrupt.py): a plain ``Future.result()`` then sleeps on
until the future is done (the helper completes it after ``GIVE_UP_S``, so a regression fails instead of hanging)."""

from __future__ import annotations

import sys
from concurrent.futures import Future

import pytest
from other_thread_interrupt import GIVE_UP_S, Stopped, sigint_raises_stopped, signalled_from_another_thread

from attnviz.core.interrupts import result_of

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pthread_kill is POSIX")


@pytest.fixture
def stopped_on_sigint():
    with sigint_raises_stopped():
        yield


def test_result_of_raises_a_ctrl_c_received_by_another_thread_before_the_future_is_done(stopped_on_sigint):
    future: Future[int] = Future()
    helper, caught = signalled_from_another_thread(lambda: future.done() or future.set_result(1))
    helper.start()
    try:
        with pytest.raises(Stopped):
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
