"""A Ctrl-C while the overview pools a large layer's heads on threads (core/view/overview.py's ``_pool_map``: the
figure command's thumbnails; with kept mass a head of 8,192 tokens sorts every row, seconds) is raised at once
when the kernel hands it to one of the pooling threads, not once the head in progress is done; the heads not
started are not pooled for nothing, and the pool serves the next call.  Nor does the command's exit wait for the
heads in progress: the pool's threads (not daemon threads) do not keep it from leaving at once (cli._leave_at_once)."""

from __future__ import annotations

import os
import sys
import threading

import numpy as np
import pytest
from other_thread_interrupt import GIVE_UP_S, Stopped, sigint_raises_stopped, signalled_from_another_thread

from attnviz import cli
from attnviz.core.view import overview

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pthread_kill is POSIX")


@pytest.fixture
def stopped_on_sigint(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 4)  # threads even on a one-core runner
    with sigint_raises_stopped():
        yield


def test_a_ctrl_c_received_by_a_pooling_thread_stops_the_wait_for_the_heads(stopped_on_sigint):
    release = threading.Event()
    started: list[int] = []
    finished: list[int] = []

    def head(h: int) -> np.ndarray:
        started.append(h)
        release.wait(GIVE_UP_S)  # the heads in progress: held until the test releases them (or give up)
        finished.append(h)
        return np.full((2, 2), h, np.float32)

    helper, caught = signalled_from_another_thread(release.set)
    helper.start()
    try:
        with pytest.raises(Stopped):
            overview._pool_map(head, 64, overview.POOL_THREADS_FROM)
        assert not finished  # raised while the first heads were still being pooled
    finally:
        caught.set()
        release.set()
        helper.join(GIVE_UP_S + 5)
    again = overview._pool_map(lambda h: np.full((2, 2), h, np.float32), 8, overview.POOL_THREADS_FROM)
    assert [int(a[0, 0]) for a in again] == list(range(8))  # in order, by the same pool
    assert len(started) <= 8  # one a pool thread: the other 56+ heads, not started when it was raised, never were


class _Left(Exception):
    pass


def _left(code: int) -> None:
    raise _Left(code)


def test_a_busy_pooling_thread_does_not_keep_the_command_from_leaving_at_once(stopped_on_sigint, monkeypatch):
    monkeypatch.setattr(cli.atexit, "_run_exitfuncs", lambda: None)
    monkeypatch.setattr(cli.os, "_exit", _left)
    overview._pool_map(lambda h: np.zeros((1, 1), np.float32), 8, overview.POOL_THREADS_FROM)  # the pool made
    release = threading.Event()
    busy = overview._POOL[0].submit(release.wait, GIVE_UP_S)  # a head in progress
    other = threading.Thread(target=release.wait, args=(GIVE_UP_S,), name="a-writer")  # not daemon either
    try:
        with pytest.raises(_Left):
            cli._leave_at_once(130)
        other.start()
        assert cli._leave_at_once(130) is None  # any other thread the exit would wait for still holds it back
        assert not busy.done()
    finally:
        release.set()
    other.join(GIVE_UP_S)
