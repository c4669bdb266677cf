"""A pool task that reports what a corpus worker process has imported (tests/corpus/test_light_worker.py).

Each of ``n`` tasks waits at a barrier of ``n`` parties before it answers, so ``n`` tasks submitted to a pool of
``n`` busy-free processes are answered by ``n`` different processes (one process runs one task at a time)."""

from __future__ import annotations

import os
import sys

WATCHED = ("onnx", "attnviz.runtime.model", "attnviz.runtime.statgraph", "attnviz.runtime.memory")


def report(barrier) -> tuple[int, list[str]]:
    barrier.wait(timeout=60)
    return os.getpid(), [m for m in WATCHED if m in sys.modules]


def watch_close(engines, seen: list) -> None:
    """Have every pool the driver closes first report each of its processes' modules into ``seen``."""
    import multiprocessing as mp

    real = engines.WarmPool.close

    def close(self, kill: bool = False, wait: bool = True) -> None:
        procs = len(self.pool._processes or {})
        if procs:
            # spawned, not forked: the driver has threads (and onnxruntime's) running, and a fork of it may start
            # with the allocator's locks held by one ("corrupted double-linked list" killed a manager once)
            with mp.get_context("spawn").Manager() as manager:
                barrier = manager.Barrier(procs)
                jobs = [self.pool.submit(report, barrier) for _ in range(procs)]
                seen.append(sorted(j.result(timeout=120) for j in jobs))
        real(self, kill, wait)

    engines.WarmPool.close = close
