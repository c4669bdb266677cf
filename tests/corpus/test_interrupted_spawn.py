"""A Ctrl-C while a corpus command's worker processes spawn (its first act, before it imports numpy): the processes
already up are stopped with the command, not left warming up (they ignore SIGINT) while the interrupted command's
exit waits on them (concurrent.futures joins its pools at exit: >30 s on a loaded machine, a CI failure)."""

from __future__ import annotations

import signal
import sys
from concurrent.futures import ProcessPoolExecutor

import pytest

from attnviz.corpus.engines import WarmPool, WorkerSetup


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_ctrl_c_between_two_spawns_stops_the_first(planted, monkeypatch):
    """The first process is stopped (SIGTERM) by the interrupted start itself; before, it warmed up and lived on
    until the executor was collected or the interpreter's exit joined it (exit code 0, or still running)."""
    real = ProcessPoolExecutor.submit
    spawned: list = []

    def submit(self, *a, **k):
        if spawned:  # the second task: the interrupt lands here, the first process is up
            raise KeyboardInterrupt
        f = real(self, *a, **k)
        spawned.extend(self._processes.values())
        return f

    monkeypatch.setattr(ProcessPoolExecutor, "submit", submit)
    setup = WorkerSetup(str(planted[0]), "cpu", None, 1, 3, (), 2, layout="processes")
    with pytest.raises(KeyboardInterrupt):
        WarmPool.start(setup, 2)
    assert spawned
    for p in spawned:
        p.join(30)
        assert p.exitcode == -signal.SIGTERM
