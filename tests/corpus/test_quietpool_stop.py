"""QuietPool.stop() terminates busy workers (a Ctrl-C mid-run): one killed in the middle of sending a large result
must not leave the pool's manager thread reading the rest of it for ever (stop, and the interpreter's exit, would
join that thread: a hang instead of a prompt exit)."""

from __future__ import annotations

import platform
import sys
import threading
import time

import pytest

from attnviz.corpus.quietpool import QuietPool

WRITE = {"x86_64": 1, "aarch64": 64}.get(platform.machine())  # the write system call's number


def _big(n: int) -> bytes:
    return b"x" * n


def _noop() -> None:
    return None


def _in_write(pid: int) -> bool:
    """The process is inside write(2) (its first /proc/PID/syscall field is the number while it is blocked)."""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            return f.read().split()[0] == str(WRITE)
    except (OSError, IndexError):
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux") or WRITE is None, reason="reads /proc/PID/syscall")
def test_stop_while_a_worker_sends_a_large_result_returns_and_the_manager_ends():
    pool = QuietPool(1, _noop, ())
    pool.submit(_noop).result(timeout=60)  # the worker is up
    (pid,) = list(pool._processes)
    # 256 MB through a 64 KiB pipe: the worker sits in write(2) with part of its message sent, the moment a
    # SIGTERM can land in
    future = pool.submit(_big, 256 << 20)
    deadline = time.monotonic() + 60
    while not _in_write(pid):
        assert time.monotonic() < deadline, "the worker never blocked in write(2)"
        time.sleep(0.001)
    manager = pool._executor_manager_thread
    done = threading.Event()
    threading.Thread(target=lambda: (pool.stop(), done.set()), daemon=True).start()
    assert done.wait(30), "stop() hung on a worker killed mid-result"
    manager.join(30)
    assert not manager.is_alive()
    assert future.done()
