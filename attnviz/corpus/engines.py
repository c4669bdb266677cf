"""Engines turn batch specs into partials, in batch order (registry: ``--engine local|ray``).

Each engine gets the same :class:`WorkerSetup` and yields :class:`~attnviz.corpus.reduce.Partial` objects in
``batch_id`` order; the driver folds them, so every engine produces the same statistics.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from attnviz import AttnvizError
from attnviz.core.interrupts import result_of
from attnviz.corpus.quietspawn import settle

# the reduction (numpy, the runtime) is imported where a worker builds its reducer, not here: the driver of
# `attnviz corpus` starts its pool (WarmPool, WorkerSetup) before it imports numpy (corpus/prestart.py)
if TYPE_CHECKING:
    import threading
    from concurrent.futures import Future

    from attnviz.corpus.plan import BatchSpec
    from attnviz.corpus.quietpool import QuietPool
    from attnviz.corpus.reduce import BatchReducer, HeadGroup, Partial
    from attnviz.runtime.light_model import LightModel
    from attnviz.runtime.model import AttentionModel


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
    kind: str | None = None  # the model's kind as the driver's probe found it (None: before the probe)
    layout: str = "processes"  # how the local engine places the workers (LAYOUTS)
    # this setup's own token, carried to every process with it (and by dataclasses.replace): each process asks where
    # its sessions run once per setup (_device), not at each of a worker's 3-4 questions; never compared (fits)
    asked: str = field(default_factory=lambda: os.urandom(8).hex(), compare=False, repr=False)

    def reducer(self) -> BatchReducer:
        """A reducer for the driver's groups, made where a batch arrives first (the other process took both
        warm-ups, or this one's failed): over the light model where its probe was kept (runtime/light_model.py),
        else the model opened and probed."""
        from attnviz.corpus.reduce import BatchReducer

        light = self.light()
        if light is not None and light.take_probe() is None:
            light = None  # (no kept probe for it to take: the model's own probe, as before)
        groups = list(self.groups)
        return BatchReducer(self.model, self.provider, self.tokenizer, self.threads, self.k, groups, opened=light)

    def probed(self, model: AttentionModel | LightModel) -> BatchReducer:
        """A reducer over ``model``, this setup's model that this process probed for the driver (:func:`_probe`):
        neither opened nor probed again (a probe builds a session with every map exposed and runs it: ~0.13 s
        CPU for MiniLM).  The groups are its probe's, which the driver adopted (:func:`_work` checks them)."""
        from attnviz.corpus.reduce import BatchReducer
        from attnviz.runtime.light_model import LightModel

        # the probe's session goes first, as when the probe's model was dropped (one copy of the weights, one CUDA
        # session at a time); its device, which the statistics layout follows, is known (a light model holds none).
        # Not where only a record says where ``auto`` lands: the probe's session then says where it did
        if _device_known(self) and not _by_record(self) and not isinstance(model, LightModel):
            model.close_session("dense")
        r = BatchReducer(self.model, self.provider, self.tokenizer, self.threads, self.k, opened=model)
        r.prepare()  # the statistics session (elsewhere it replaces the probe's: InGraphReducer.build)
        return r

    def warm(self) -> BatchReducer:
        """A pool process's worker, opened before its first batch arrives (a subclass with another kind of work,
        e.g. :class:`attnviz.corpus.ablate_work.AblateSetup`, opens its own)."""
        # the heads and kind come with the first batch (BatchReducer.adopt): the driver probes the model itself,
        # and a probe here would build a session of the model with every map exposed only to count them
        from attnviz.corpus.reduce import BatchReducer

        known = _device_known(self)
        r = BatchReducer(
            self.model, self.provider, self.tokenizer, self.threads, self.k, probe=not known, opened=self.light()
        )
        r.prepare()  # the statistics session, while the driver still plans
        return r

    def light(self) -> LightModel | None:
        """The model as earlier commands kept it for a worker (runtime/light_model.py: no onnx imported, nothing
        parsed), where the device of this worker's sessions is known before one exists (:func:`_device`); else
        None (it opens the model)."""
        device = _device(self)
        if device is None:
            return None
        from attnviz.runtime.light_model import light

        return light(self.model, self.provider, self.tokenizer, self.threads, device)


# each setup's answer in this process (_device), by its token: a command's setup is one token in all its processes
_DEVICES: dict[tuple[str, str, str, int], str | None] = {}


def _device(setup: WorkerSetup) -> str | None:
    """Where ``setup``'s sessions run, known before one exists (runtime/device.py): "cpu", "cuda", None.  Where it is known, what earlier commands kept for a worker is
    read back (the probe, the light model: no onnx, no parse, no probe's session), on CUDA as on the CPU; the
    statistics graph's layout follows it (graph_reduce.InGraphReducer joins the sites on CUDA).  Asked once per
    setup in a process (a stat of onnxruntime's build, the model's hash, a record read), not at each question."""
    from attnviz.runtime import device, landings

    # (and again where this process kept or forgot where ``auto`` lands since: the answer a fresh ask would give)
    key = (setup.asked, setup.model, setup.provider, landings.count())
    if key not in _DEVICES:
        if len(_DEVICES) > 16:  # a long-lived process (the window's pool across runs): the last commands' only
            _DEVICES.clear()
        _DEVICES[key] = device.before_session(setup.model, setup.provider)
    return _DEVICES[key]


def _device_known(setup: WorkerSetup) -> bool:
    return _device(setup) is not None


def _by_record(setup: WorkerSetup) -> bool:
    """``auto`` on CUDA only as far as an earlier command's worker found (runtime/device.py): where the driver plans
    from this worker's answer (:func:`_probe`), a session made now says it first (CUDA may be unusable since)."""
    return setup.provider == "auto" and _device(setup) == "cuda"


def _cpu_only(setup: WorkerSetup) -> bool:
    return _device(setup) == "cpu"


def _probes_in_worker(setup: WorkerSetup) -> bool:
    """Whether a worker answers the driver's probe.  On the CPU a probe there holds no GPU memory; on a GPU
    (``cuda``, or ``auto`` with a GPU present unless it is known to land on the CPU) only in the shared layout,
    whose one process then holds the run's only CUDA session (the probe's, replaced by the statistics session:
    InGraphReducer.build), where the driver's isolation child would start a process and a CUDA session of its own;
    ``auto``'s probe there also keeps where it landed, for the next command (runtime/device.py).  The
    process layout's GPU workers build their sessions meanwhile instead."""
    from attnviz.runtime.device import before_session

    # (records only ever say CUDA: not read here, in the driver before it imports numpy: WarmPool.start)
    cpu = before_session(setup.model, setup.provider, kept=False) == "cpu"
    return cpu or (setup.provider in ("cuda", "auto") and LAYOUTS[setup.layout].shared)


@dataclass(frozen=True)
class WorkerLayout:
    """How the local engine places ``--workers``: ``shared``: one process holding one session, on which that many
    batches run at once from threads (``BatchReducer.many``'s depth); else one process and session per worker.

    On a GPU the four processes of the process layout overlapped their host work with the device (the loop beat
    plain onnxruntime: 1.08x on an H100) but paid four start-ups and four CUDA sessions, ~1.7 s of a 2 s job
    (bench/RESULTS.md, session 14); one process alone left the device idle while it did its numpy.  One process
    with several runs in flight on its one session pays for one of each and keeps the overlap.  On a CPU the
    processes stay: a batch's numpy there competes with onnxruntime for the same cores, and a process per core
    runs level with plain onnxruntime's."""

    name: str
    shared: bool
    chunk_cpu: int  # batches a task, with the session on the CPU
    chunk_gpu: int  # and on a GPU

    def processes(self, workers: int) -> int:
        return 1 if self.shared else max(1, workers)

    def depth(self, workers: int) -> int:
        """Runs in flight in one process: the next batch's run while this one is folded (1), or ``workers``."""
        return max(1, workers) if self.shared else 1

    def chunk(self, gpu: bool) -> int:
        return self.chunk_gpu if gpu else self.chunk_cpu


GPU_CHUNK = 8  # batches per task on a GPU: a worker runs one while it folds the one before (BatchReducer.many)
# one process: a task's runs drain before the next task's start (the worker cannot see it coming), once a task
SHARED_CHUNK = 32

LAYOUTS = {
    # on a CPU a batch's numpy competes with onnxruntime for the same cores: one batch a task
    "processes": WorkerLayout("processes", shared=False, chunk_cpu=1, chunk_gpu=GPU_CHUNK),
    "threads": WorkerLayout("threads", shared=True, chunk_cpu=SHARED_CHUNK, chunk_gpu=SHARED_CHUNK),
}
LAYOUT_BY_DEVICE = {False: "processes", True: "threads"}  # keyed by "the sessions run on a GPU"
LAYOUT_ENV = "ATTNVIZ_CORPUS_LAYOUT"  # a layout forced for every device (benches compare them; tests run both)
CHUNK_ENV = "ATTNVIZ_CORPUS_CHUNK"  # batches a task, forced (bench/corpus_ab.py compares task sizes)


def _chunk_forced() -> int:
    from attnviz.core.limits import env_count

    return env_count(CHUNK_ENV, "the batches a task") or 0


def choose_layout(gpu: bool) -> str:
    """The layout for sessions on a GPU (``gpu``) or on the CPU: :data:`LAYOUT_ENV` where set, else the device's."""
    return layout_choice(gpu)[0]


def layout_choice(gpu: bool) -> tuple[str, str]:
    """(:func:`choose_layout`'s layout, what chose it: :data:`LAYOUT_ENV` where it names one, else "the device"):
    run.json records both, so that a result made with a layout forced against its device says so."""
    forced = os.environ.get(LAYOUT_ENV, "").strip()
    if forced and forced not in LAYOUTS:
        raise AttnvizError(f"{LAYOUT_ENV}={forced}: unknown worker layout; use {' or '.join(LAYOUTS)} (or unset it)")
    return (forced, LAYOUT_ENV) if forced else (LAYOUT_BY_DEVICE[gpu], "the device")


_REDUCER: BatchReducer | None = None  # one per pool process: its own onnxruntime session
# the model this process probed for the driver (_probe), with what it was opened with: its reducer takes it over
# (_own_reducer), so that a worker that probes opens and probes the model once
_PROBED: tuple[tuple, AttentionModel | LightModel | BatchReducer] | None = None


def _enter_worker() -> None:
    import multiprocessing as mp

    from attnviz.runtime.lifetime import die_with_parent

    parent = mp.parent_process()  # spawned by the driver's thread that runs the corpus (it outlives the pool)
    if parent is not None and parent.pid is not None:  # a kill -9 of the driver takes its workers along
        die_with_parent(parent.pid, parent.sentinel)
    settle()  # Ctrl-C is the driver's: it checkpoints and stops the pool
    # this process is already the crash boundary (a dead worker breaks the pool, below): a second process
    # per worker for onnxruntime would only copy every batch's maps across once more
    os.environ["ATTNVIZ_INPROCESS"] = "1"


def _warm(setup: WorkerSetup, now: bool = True) -> None:
    """Pool initializer: open the session before the first batch arrives (``now=False``: a task does, after the
    probe).  An error here is left for that batch to raise as itself (an initializer's exception would only
    break the pool, with no message)."""
    _enter_worker()
    _cuda_early(setup)
    if now:
        _warm_up(setup)


def _cuda_early(setup: WorkerSetup) -> None:
    """A worker whose sessions will run on CUDA makes the device's context on a thread now, while it imports
    (runtime/cuda_warm.py): its first session no longer waits for it.  ``auto`` where a GPU and a CUDA build are
    present (where its CUDA libraries turn out missing, the context is made for nothing and the session lands on
    the CPU as before)."""
    from attnviz.runtime.device import asks_cuda

    if asks_cuda(setup.model, setup.provider):
        from attnviz.runtime import cuda_warm

        cuda_warm.start()


def _warm_up(setup: WorkerSetup) -> None:
    """:func:`_warm`'s session, as a pool task where the pool probes first (``WarmPool.start(probe=True)``);
    nothing in a process that is warm already."""
    global _REDUCER
    if _REDUCER is not None:
        return
    try:
        _REDUCER = _own_reducer(setup, warm=True)
    except Exception:
        _REDUCER = None


def _opened_as(setup: WorkerSetup) -> tuple:
    return (type(setup), setup.model, setup.provider, setup.tokenizer, setup.threads)


def _own_reducer(setup: WorkerSetup, warm: bool) -> BatchReducer:
    """This process's reducer: over the model it probed (:data:`_PROBED`, taken once), else ``setup``'s own
    (``warm``: :meth:`WorkerSetup.warm`, before the driver's probe; else :meth:`WorkerSetup.reducer`)."""
    global _PROBED
    probed, _PROBED = _PROBED, None
    if probed is not None and probed[0] == _opened_as(setup):
        from attnviz.corpus.reduce import BatchReducer

        return probed[1] if isinstance(probed[1], BatchReducer) else setup.probed(probed[1])
    return setup.warm() if warm else setup.reducer()


def _ready() -> int:
    return os.getpid()


def _probe(setup: WorkerSetup) -> tuple[tuple, str | None]:
    """A pool task: the driver's probe (:meth:`~attnviz.runtime.model.Model.probe_state`) and the provider its
    session got (None: no session), run here where onnxruntime is already imported, instead of in a crash-isolation
    child that the driver would start for it (interpreter and imports: ~0.25 s CPU).  A model of its own, so
    that the driver's state (which it adopts) is this probe's alone.  This process's reducer then takes that model
    over (:func:`_own_reducer`) where the probe counted every head: opened and probed once."""
    global _PROBED
    light = setup.light()
    taken = light.take_probe() if light is not None else None
    if light is not None and taken is not None and all(s.heads for s in light.sites):
        # the last command's worker kept this probe for a worker that opens nothing (runtime/light_model.py)
        _PROBED = (_opened_as(setup), light)
        if not _by_record(setup):
            return light.probe_state(), taken
        # ``auto`` where it landed on CUDA before: the statistics session first (on CUDA, else the model opened as
        # ``auto`` opens it: the CPU), and the driver plans for the device it got, as it did from auto's probe
        ready = _own_reducer(setup, warm=True)
        _PROBED = (_opened_as(setup), ready)
        return light.probe_state(), _ran_on(ready)
    from attnviz.runtime import light_model, open_model
    from attnviz.runtime import probe_kept as pk

    model = open_model(setup.model, provider=setup.provider, tokenizer=setup.tokenizer, threads=setup.threads)
    model.keep_optimized = True  # its probe's session from onnxruntime's graph kept by the last command (optcache)
    # the last command's probe of the same file, code and versions (runtime/probe_kept.py): no session with every
    # map exposed is made for one dummy run (~0.1 s CPU); taken before the probe, which may relabel the stacks
    # (not where a record says CUDA for ``auto``: the probe's session says whether it still lands there)
    key = pk.probe_key(model) if _device_known(setup) and not _by_record(setup) else None
    found = pk.kept(key, len(model.sites)) if key is not None else None
    provider: str | None
    if found is not None and model.adopt_probe(found.state):
        provider = found.provider
    else:
        ran = model.probe()
        try:
            provider = model.provider
        except Exception:  # as run._gpu_session: the driver asks again (and says what is wrong where it did)
            provider = None
        if key is not None and ran and provider is not None:
            pk.keep(key, pk.KeptProbe(model.probe_state(), provider))
    # and for the next command's light worker (none made now); ``auto`` with a GPU present: with the provider its
    # session landed on, which the next command's worker then takes as its device (runtime/device.py)
    if provider is not None and model.probe_state()[0]:
        light_model.keep_probe(model, pk.KeptProbe(model.probe_state(), provider))
    state = model.probe_state()
    if provider is not None and all(s.heads for s in model.sites):  # else the reducer opens its own, as before
        _PROBED = (_opened_as(setup), model)
    return state, provider


def _ran_on(r: BatchReducer) -> str:
    """The provider ``r``'s statistics session runs on (else its model's)."""
    from attnviz.corpus.graph_reduce import InGraphReducer

    return r.in_graph.sess.provider if isinstance(r.in_graph, InGraphReducer) else r.model.provider


def _work(setup: WorkerSetup, specs: list[BatchSpec]) -> list[Partial]:
    global _REDUCER
    from attnviz.corpus.reduce import BatchReducer

    if isinstance(_REDUCER, BatchReducer) and not _REDUCER.heads_known:  # warmed up unprobed: the driver's probe
        _REDUCER.adopt(setup.groups, setup.kind)
    elif isinstance(_REDUCER, BatchReducer) and "audio" in _REDUCER.meta:  # a speech model's heads: the
        _REDUCER.adopt(setup.groups)  # driver's (its probe leaves them unknown): the same session reduces them
    if _REDUCER is None or _REDUCER.groups != list(setup.groups):  # warm-up failed (or saw other heads): again
        _enter_worker()
        _REDUCER = _own_reducer(setup, warm=False)
    parts = _REDUCER.many(specs, LAYOUTS[setup.layout].depth(setup.workers))
    if not isinstance(_REDUCER, BatchReducer):  # (`attnviz ablate`'s workers: partials of their own)
        return parts
    from attnviz.corpus.reduce import combine

    # one partial a task: the driver gets one small message and one fold where it got one a batch
    return combine(parts, _REDUCER.k)


@dataclass
class WarmPool:
    """Local worker processes started before the driver opens the model and plans, so that their start-up
    (spawn, imports, session, probe: 1.5-3 s a worker on this 2-core box) overlaps the driver's own."""

    setup: WorkerSetup
    pool: QuietPool
    started: int
    exiting: list[threading.Thread] = field(default_factory=list)  # close(wait=False): joined by the next close
    probing: Future | None = None  # start(probe=True): the probe, queued before the warm-ups

    @classmethod
    def start(cls, setup: WorkerSetup, processes: int, probe: bool = False) -> WarmPool:
        """``processes`` of ``setup.workers`` started, each opening its session.  ``probe``: the driver will ask
        for the model's probe (:meth:`probe`); where every process starts now and the sessions are on the CPU,
        the probe is the first task, ahead of the warm-ups, so that the first process to be up answers it while
        the others open their sessions (queued behind a warm-up, the driver waited on both: ~0.3 s)."""
        from attnviz.corpus.quietpool import QuietPool

        procs = LAYOUTS[setup.layout].processes(setup.workers)
        n = max(1, min(processes, procs))
        # every process now: one more task than processes would start one process more (a tiny corpus's)
        first = probe and n == procs and _probes_in_worker(setup)
        # spawn, quiet on Ctrl-C from the start, not only once _warm runs: a fork would copy the driver's
        # onnxruntime thread pools into the children
        pool = QuietPool(procs, _warm, (setup, not first))
        try:
            probing = pool.submit(_probe, setup) if first else None
            task = (_warm_up, setup) if first else (_ready,)
            for _ in range(n):  # each task that finds no idle process starts one (3.11: spawn pools grow on demand)
                pool.submit(*task)
        except BaseException:
            # a Ctrl-C while the processes spawn (the command's first act): those up ignore it and would warm up
            # while the interrupted command's exit joined them; every one is now the pool's (quietpool.held: one
            # not yet recorded was never stopped, and the exit joined it for ever), stopped and joined here
            pool.stop()
            raise
        return cls(setup, pool, n, probing=probing)

    def probe(self) -> Future:
        """The model's probe (:func:`_probe`): the one queued first by :meth:`start`, else in the first worker
        that is warm."""
        job, self.probing = self.probing, None
        return job if job is not None else self.pool.submit(_probe, self.setup)

    def probes(self) -> bool:
        """Its first process answers the driver's probe (:meth:`probe`) where the driver's isolation child would."""
        return _probes_in_worker(self.setup)

    def fits(self, setup: WorkerSetup) -> bool:
        """The same sessions (model, provider, threads) and enough processes for ``setup``."""
        mine, theirs = self.setup, setup
        return (mine.model, mine.provider, mine.tokenizer, mine.threads, mine.k, mine.layout) == (
            theirs.model,
            theirs.provider,
            theirs.tokenizer,
            theirs.threads,
            theirs.k,
            theirs.layout,
        ) and mine.workers >= theirs.workers

    def close(self, kill: bool = False, wait: bool = True) -> None:
        """Stop the processes; ``kill``: without waiting for one that is still opening the model (after an
        error, the model may be one that hangs onnxruntime) or running a batch (after a Ctrl-C).  ``wait=False``:
        their exit is waited for by the next close that waits (the caller's, after it wrote its results: the
        processes' teardown, ~0.03 s, then overlaps the writes instead of preceding them)."""
        manager = getattr(self.pool, "_executor_manager_thread", None)  # joins the processes; None once shut down
        if kill:
            self.pool.stop(wait=wait)
        else:
            self.pool.shutdown(wait=wait, cancel_futures=True)
        if not wait and manager is not None:
            self.exiting.append(manager)
        while wait and self.exiting:
            self.exiting.pop().join()


def carried(setup: WorkerSetup, early: WorkerSetup) -> WorkerSetup:
    """``setup`` as the tasks in a pool started on ``early`` (the same command's, fitting it) carry it: with the
    pool's token, so that its processes, which asked where their sessions run for ``early`` (:func:`_device`),
    do not ask again for the run's setup, planned since (another token; the same model and provider)."""
    return replace(setup, asked=early.asked)


_OFFERED: list[WarmPool] = []  # started early by the driver (prestart.prestart) for the local_engine call that follows


def offer(warm: WarmPool) -> None:
    """Hand a pool started early to the next :func:`local_engine` call (the caller still closes it in the end)."""
    _OFFERED.append(warm)


def _claim() -> WarmPool | None:
    return _OFFERED.pop() if _OFFERED else None


def withdraw() -> None:
    """Forget pools offered and not taken (the run that offered them is over)."""
    _OFFERED.clear()


def local_engine(setup: WorkerSetup, specs: list[BatchSpec]) -> Iterator[Partial]:
    """A spawn pool of ``setup.workers`` processes, each with its own session, or of one process running that many
    batches at once on its one session (``setup.layout``: :data:`LAYOUTS`); partials come back in batch order.

    At most two tasks per process are in flight, so partials never pile up in the driver.  A pool offered
    earlier (:func:`offer`) is used when it fits ``setup``."""
    warm = _claim()
    offered = warm is not None  # its caller closes it again in the end (run.run_corpus), waiting there
    if not specs:
        return
    from collections import deque
    from concurrent.futures.process import BrokenProcessPool

    if warm is None or not warm.fits(setup):
        if warm is not None:
            warm.close()
        warm = WarmPool.start(setup, setup.workers)
        offered = False
    else:
        setup = carried(setup, warm.setup)
    pool = warm.pool
    lay = LAYOUTS[setup.layout]
    chunk = _chunk_forced() or lay.chunk(setup.gpu)
    todo = (specs[i : i + chunk] for i in range(0, len(specs), chunk))
    window: deque = deque()
    done = False
    try:
        for task in itertools.islice(todo, 2 * lay.processes(setup.workers)):
            window.append(pool.submit(_work, setup, task))
        while window:
            parts = result_of(window.popleft())
            nxt = next(todo, None)
            if nxt is not None:
                window.append(pool.submit(_work, setup, nxt))
            if not window:  # the last batch is back: every worker is idle and holds nothing the run needs
                done = True
            yield from parts
    except BrokenProcessPool:
        # (imported here: the crash-isolation host's modules are ~5 ms of a driver that never starts its child)
        from attnviz.runtime.host import ModelCrashed

        raise ModelCrashed(
            "the model crashed onnxruntime: a corpus worker process died while running a batch; the model cannot be run"
        ) from None
    finally:
        for f in window:
            f.cancel()
        # idle workers are stopped, not asked to exit: a worker's own exit (freeing its sessions, tearing down
        # its interpreter) took ~1 s on this 2-core box, on the command's critical path before the results are
        # written (a plain multiprocessing.Pool's __exit__ terminates its workers too).  Busy ones (a Ctrl-C or an
        # error mid-run) are stopped too: a shutdown waited for every batch in flight, seconds for big batches,
        # whose results no one reads (the driver keeps what it folded: its checkpoint)
        warm.close(kill=True, wait=not (done and offered))


def ray_engine(setup: WorkerSetup, specs: list[BatchSpec]) -> Iterator[Partial]:
    """Driver-planned batches through Ray (``--images``; ``--texts`` goes through Ray Data's own reading)."""
    from attnviz.corpus.ray_engine import run_specs

    yield from run_specs(setup, specs)


ENGINES = {"local": local_engine, "ray": ray_engine}


GPU_LOCAL_WORKERS = 4  # batches in flight on one GPU: runs on the one session (or processes: LAYOUTS)


def default_threads(workers: int) -> int:
    return max(1, (os.cpu_count() or 1) // max(1, workers))


def default_workers(provider: str, gpu: bool, engine: str = "local") -> int:
    cores = max(1, os.cpu_count() or 1)
    if gpu and provider in ("cuda", "auto"):
        if engine == "ray":
            return 1  # its actors ask for a whole GPU each
        # batches in flight on the GPU: when the maps were reduced in numpy, one worker ran at 0.04x of plain CUDA
        # inference per batch (H100, bench/RESULTS.md) and several reduced side by side.  Now only [B, H, S]
        # leaves the session and the fold of one batch overlaps the runs of the next (BatchReducer.many); four
        # processes still ran the loop at 1.08x plain where one ran it at 0.60x (H100, session 14)
        return max(1, min(GPU_LOCAL_WORKERS, cores // 2))
    return cores
