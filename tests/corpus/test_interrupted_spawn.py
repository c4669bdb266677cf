"""A Ctrl-C while a corpus command's worker processes spawn (its first act, before it imports numpy): every process
already spawned is stopped with the command, quietly (attnviz/corpus/quietpool.py).

Before, a Ctrl-C raised inside the pool's ``submit`` (by a SIGINT that one of the driver's other threads received)
left a process the pool had not recorded: one still waiting for its start-up data (which never came), or one that
started and then waited on the pool's queue for ever, which the interpreter's exit joined for ever; a process the
pool had recorded warmed up (it ignores SIGINT) while the exit waited on it, >30 s on a loaded machine."""

from __future__ import annotations

import os
import signal
import sys
from multiprocessing import util

import pytest

from attnviz.corpus.engines import WarmPool, WorkerSetup
from attnviz.corpus.quietpool import held

psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _live(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_ctrl_c_held_surfaces_when_the_block_ends():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with held():
            os.kill(os.getpid(), signal.SIGINT)
            done.append("the rest of the block ran")
    assert done == ["the rest of the block ran"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_a_ctrl_c_ignored_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with held():
            os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("at", [1, 2], ids=["first-spawn", "second-spawn"])
def test_a_ctrl_c_during_a_spawn_leaves_no_process_and_no_traceback(planted, monkeypatch, capfd, at):
    """The SIGINT comes right after the ``at``-th worker's interpreter was spawned, before the driver wrote its
    start-up data: the first spawn's arrives once the starting thread unblocks it (after ``Process.start``, before
    the pool recorded the process: before, that process lived on, or died on the pool's queues freed under it with
    a FileNotFoundError traceback); the second's reaches the pool's manager thread and surfaces in the driver's main
    thread at once (before, that process waited for its data for ever, and the first warmed up).  Now the start
    raises KeyboardInterrupt with every process it spawned gone (stopped and joined), none having printed."""
    real = util.spawnv_passfds
    pids: list[int] = []

    def spawn(path, args, fds):
        pid = real(path, args, fds)
        if "--multiprocessing-fork" in args:  # a pool process (the resource tracker is spawned this way too)
            pids.append(pid)
            if len(pids) == at:
                os.kill(os.getpid(), signal.SIGINT)
        return pid

    monkeypatch.setattr(util, "spawnv_passfds", spawn)
    setup = WorkerSetup(str(planted[0]), "cpu", None, 1, 3, (), 2, layout="processes")
    try:
        with pytest.raises(KeyboardInterrupt):
            WarmPool.start(setup, 2)
        left = [pid for pid in pids if _live(pid)]
    finally:
        for pid in pids:  # (the old code's strays: stopped before the assertions fail)
            if _live(pid):
                os.kill(pid, signal.SIGKILL)
    assert len(pids) == at and left == []
    err = capfd.readouterr().err  # the processes' stderr is this one's (fd 2)
    assert "Traceback" not in err and "Error" not in err, err
