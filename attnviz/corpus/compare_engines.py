"""Where ``attnviz compare A B --texts FILE`` reduces its batches (registry: ``--engine local|ray``).

Each engine takes the driver's :class:`~attnviz.corpus.compare_reduce.CompareTask` list and yields
:class:`~attnviz.corpus.compare_reduce.ComparePartial` objects in batch order.  Each worker holds both models (a
:class:`~attnviz.corpus.compare_reduce.PairReducer`, opened once).  The local pool mirrors
:func:`attnviz.corpus.engines.local_engine` (spawned processes that die with the driver, at most two tasks per
worker in flight); Ray runs the tasks through :func:`attnviz.corpus.ray_engine.run_specs`, whose actor only asks a
setup for ``reducer()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnviz.core.interrupts import result_of
from attnviz.corpus.compare_reduce import ComparePartial, CompareSetup, CompareTask, PairReducer
from attnviz.corpus.engines import _enter_worker

if TYPE_CHECKING:
    from attnviz.corpus.quietpool import QuietPool

_PAIR: PairReducer | None = None  # one per pool process: both models' sessions


def _warm(setup: CompareSetup) -> None:
    """Pool initializer: open both models before the first task.  An error is left for that task to raise as
    itself (an initializer's exception would only break the pool, with no message)."""
    global _PAIR
    _enter_worker()
    try:
        _PAIR = setup.reducer()
    except Exception:
        _PAIR = None


def _ready() -> int:
    import os

    return os.getpid()


def _work(setup: CompareSetup, task: CompareTask) -> ComparePartial:
    global _PAIR
    if _PAIR is None or _PAIR.setup.sessions != setup.sessions:  # the warm-up failed (or opened others): again
        _enter_worker()
        _PAIR = setup.reducer()
    _PAIR.setup = setup  # the sites and outputs the driver matched after the warm-up
    return _PAIR(task)


@dataclass
class ComparePool:
    """Worker processes started before the driver opens and plans (both start-ups overlap); the driver's setup
    (matched sites, outputs) comes later, with :meth:`ready`."""

    pool: QuietPool
    setup: CompareSetup

    @classmethod
    def start(cls, setup: CompareSetup, processes: int) -> ComparePool:
        from attnviz.corpus.quietpool import QuietPool

        pool = QuietPool(setup.workers, _warm, (setup,))  # quiet on Ctrl-C from the start, not only once _warm runs
        try:
            for _ in range(max(1, min(processes, setup.workers))):  # spawn pools grow on demand: one task each
                pool.submit(_ready)
        except BaseException:  # a Ctrl-C while they spawn: as engines.WarmPool.start
            pool.stop()
            raise
        return cls(pool, setup)

    def close(self, kill: bool = False) -> None:
        if kill:
            self.pool.stop()
        else:
            self.pool.shutdown(wait=True, cancel_futures=True)


def local_engine(
    setup: CompareSetup, tasks: list[CompareTask], pool: ComparePool | None = None
) -> Iterator[ComparePartial]:
    """A spawn pool of ``setup.workers`` processes (``pool``: one started early); partials in batch order."""
    from collections import deque
    from concurrent.futures.process import BrokenProcessPool

    from attnviz.runtime.host import ModelCrashed

    if not tasks:
        return
    own = pool is None
    if pool is None:
        pool = ComparePool.start(setup, setup.workers)
    todo = iter(tasks)
    window: deque = deque()
    try:
        for task in todo:
            window.append(pool.pool.submit(_work, setup, task))
            if len(window) >= 2 * setup.workers:
                break
        while window:
            part = result_of(window.popleft())
            nxt = next(todo, None)
            if nxt is not None:
                window.append(pool.pool.submit(_work, setup, nxt))
            yield part
    except BrokenProcessPool:
        raise ModelCrashed(
            "a model crashed onnxruntime: a compare worker process died while running a batch; the model cannot be run"
        ) from None
    finally:
        for f in window:
            f.cancel()
        if own:  # stopped, not waited for: idle once done; after a Ctrl-C, batches no one reads (engines.local_engine)
            pool.close(kill=True)


def ray_engine(
    setup: CompareSetup, tasks: list[CompareTask], pool: ComparePool | None = None
) -> Iterator[ComparePartial]:
    """The tasks through Ray Data (``from_items``, one actor per worker holding both models)."""
    from attnviz.corpus.ray_engine import run_specs

    # duck-typed: the actor asks the setup for reducer(), workers, threads, gpu and ray_address only
    parts: Iterator = run_specs(setup, tasks)  # type: ignore[arg-type]
    yield from parts


ENGINES = {"local": local_engine, "ray": ray_engine}
