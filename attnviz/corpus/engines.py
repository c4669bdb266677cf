"""Engines turn batch specs into partials, in batch order (registry: ``--engine local|ray``).

Each engine gets the same :class:`WorkerSetup` and yields :class:`~attnviz.corpus.reduce.Partial` objects in
``batch_id`` order; the driver folds them, so every engine produces the same statistics.
"""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass

from attnviz.corpus.plan import BatchSpec
from attnviz.corpus.reduce import BatchReducer, HeadGroup, Partial


@dataclass(frozen=True)
class WorkerSetup:
    model: str
    provider: str
    tokenizer: str | None
    threads: int
    k: int
    groups: tuple[HeadGroup, ...]
    workers: int
    ray_address: str | None = None
    gpu: bool = False

    def reducer(self) -> BatchReducer:
        return BatchReducer(self.model, self.provider, self.tokenizer, self.threads, self.k, list(self.groups))


_REDUCER: BatchReducer | None = None  # one per pool process: its own onnxruntime session


def _work(setup: WorkerSetup, spec: BatchSpec) -> Partial:
    global _REDUCER
    if _REDUCER is None:  # built on the first batch (not in an initializer), so an error reaches the driver as itself
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's: it checkpoints and stops the pool
        # this process is already the crash boundary (a dead worker breaks the pool, below): a second process
        # per worker for onnxruntime would only copy every batch's maps across once more
        os.environ["ATTNVIZ_INPROCESS"] = "1"
        _REDUCER = setup.reducer()
    return _REDUCER(spec)


def local_engine(setup: WorkerSetup, specs: list[BatchSpec]) -> Iterator[Partial]:
    """A spawn pool of ``setup.workers`` processes, each with its own session; partials come back in batch order.

    At most two batches per worker are in flight, so partials never pile up in the driver."""
    if not specs:
        return
    import multiprocessing as mp
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    from attnviz.runtime.host import ModelCrashed

    # spawn: a fork would copy the driver's onnxruntime thread pools into the children
    pool = ProcessPoolExecutor(setup.workers, mp_context=mp.get_context("spawn"))
    todo = iter(specs)
    window: deque = deque()
    try:
        for spec in itertools.islice(todo, 2 * setup.workers):
            window.append(pool.submit(_work, setup, spec))
        while window:
            part = window.popleft().result()
            nxt = next(todo, None)
            if nxt is not None:
                window.append(pool.submit(_work, setup, nxt))
            yield part
    except BrokenProcessPool:
        raise ModelCrashed(
            "the model crashed onnxruntime: a corpus worker process died while running a batch; the model cannot be run"
        ) from None
    finally:
        for f in window:
            f.cancel()
        pool.shutdown(wait=True, cancel_futures=True)


def ray_engine(setup: WorkerSetup, specs: list[BatchSpec]) -> Iterator[Partial]:
    """Driver-planned batches through Ray (``--images``; ``--texts`` goes through Ray Data's own reading)."""
    from attnviz.corpus.ray_engine import run_specs

    yield from run_specs(setup, specs)


ENGINES = {"local": local_engine, "ray": ray_engine}


def default_workers(provider: str, gpu: bool) -> int:
    if gpu and provider in ("cuda", "auto"):
        return 1  # one GPU: one session
    return max(1, os.cpu_count() or 1)
