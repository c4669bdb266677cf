"""Engines turn batch specs into partials, in batch order (registry: ``--engine local|ray``).

Each engine gets the same :class:`WorkerSetup` and yields :class:`~attnviz.corpus.reduce.Partial` objects in
``batch_id`` order; the driver folds them, so every engine produces the same statistics.
"""

from __future__ import annotations

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


def _init_worker(setup: WorkerSetup) -> None:
    global _REDUCER
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's: it checkpoints and stops the pool
    _REDUCER = setup.reducer()


def _work(spec: BatchSpec) -> Partial:
    return _REDUCER(spec)


def local_engine(setup: WorkerSetup, specs: list[BatchSpec]) -> Iterator[Partial]:
    if setup.workers <= 1:
        reducer = setup.reducer()
        for s in specs:
            yield reducer(s)
        return
    import multiprocessing as mp

    # spawn: a fork would copy the driver's onnxruntime thread pools into the children
    with mp.get_context("spawn").Pool(setup.workers, initializer=_init_worker, initargs=(setup,)) as pool:
        yield from pool.imap(_work, specs, chunksize=1)  # imap keeps batch order


def ray_engine(setup: WorkerSetup, specs: list[BatchSpec]) -> Iterator[Partial]:
    """Driver-planned batches through Ray (``--images``; ``--texts`` goes through Ray Data's own reading)."""
    from attnviz.corpus.ray_engine import run_specs

    yield from run_specs(setup, specs)


ENGINES = {"local": local_engine, "ray": ray_engine}


def default_workers(provider: str, gpu: bool) -> int:
    if gpu and provider in ("cuda", "auto"):
        return 1  # one GPU: one session
    return max(1, os.cpu_count() or 1)
