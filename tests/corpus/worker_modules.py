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


def command_script(folder, flags: list[str]) -> str:
    """A ``python -c`` script that runs ``attnviz corpus`` over the planted model and a 40-line corpus in ``folder``
    (made by the run whose argument is ``make``; each run writes into ``folder / argv[1]``) with ``flags``, every
    pool the driver closes reporting its processes' modules, and prints them (tests/corpus/test_light_worker.py,
    test_cuda_worker.py)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return f"""
import sys
sys.path.insert(0, {here!r}); sys.path.insert(0, {os.path.dirname(here)!r})
from pathlib import Path
from attnviz.corpus import engines
import worker_modules
seen = []
worker_modules.watch_close(engines, seen)
from attnviz.cli import main
d = Path({str(folder)!r})
if sys.argv[1] == 'make':
    from planted import planted_model, corpus_lines
    planted_model(d / 'm.onnx')
    (d / 'c.txt').write_text(chr(10).join(corpus_lines(40)))
argv = ['corpus', str(d / 'm.onnx'), '--texts', str(d / 'c.txt'), '--out', str(d / sys.argv[1]), '--no-progress']
assert main([*argv, *{flags!r}]) == 0
print(seen)
"""
