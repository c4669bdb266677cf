"""Crash isolation: onnxruntime sessions live in a child process, so a native fault kills the child, not the app.

Untrusted models reach code paths in onnxruntime that abort the process (a 115-byte ONNX ``Attention`` with
``q_num_heads=0`` dies with SIGFPE while the session is created).  :func:`make_session` therefore returns a
:class:`RemoteSession` whose sessions are created and run in one long-lived child (spawned on first use and
kept across runs, so a run costs a pipe round trip, not a process start).  Large outputs come back in shared-memory
*slots* that both processes keep mapped and reuse (:mod:`attnviz.runtime.worker` has the ownership rule): the
caller gets numpy views onto them, and a slot goes back to the child only when no view of it is left.  Feeds
go the other way through a feed area the parent owns (:class:`~attnviz.runtime.feedarea.FeedArea`), never through
the socket.

When the child dies the call raises :class:`ModelCrashed` ("the model crashed onnxruntime: ..."); the next
call starts a fresh child and re-creates the sessions of other models transparently.  A run whose caller was
cancelled (see :func:`cancel_scope`) kills the child, which really stops onnxruntime mid-run.

``ATTNVIZ_INPROCESS=1`` runs sessions in this process instead (debugging, profiling).
"""

from __future__ import annotations

import atexit
import itertools
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from attnviz import AttnvizError
from attnviz.runtime.child import (
    ChildProcess,
    Dead,
    ModelCrashed,
    RemoteRunError,
    RunCancelled,
    cancel_scope,
    dropped,
    huge_pages_env,
    shm_dir,
)
from attnviz.runtime.errors import ort_message
from attnviz.runtime.feedarea import FeedArea
from attnviz.runtime.guard import GuardedSession, MemoryCheck
from attnviz.runtime.isolation import INLINE_BYTES, PROVIDERS, NodeArg
from attnviz.runtime.kept import HelperMemory, keep_mode
from attnviz.runtime.memory_kept import PlanHead
from attnviz.runtime.optcache import GraphKey

_T = TypeVar("_T")

# the old names of what moved to child.py and feedarea.py: tests and bench/ read host._Host, host._FeedArea, ...
_Host = ChildProcess
_FeedArea = FeedArea
_huge_pages_env = huge_pages_env
_shm_dir = shm_dir

__all__ = [
    "INLINE_BYTES",
    "PROVIDERS",
    "ModelCrashed",
    "NodeArg",
    "RemoteSession",
    "cancel_scope",
    "isolated",
    "make_session",
    "prestart",
    "shutdown",
    "take_trace",
]

_host: ChildProcess | None = None
_host_lock = threading.Lock()


def _current_host() -> ChildProcess:
    global _host
    with _host_lock:
        if _host is None or not _host.alive:
            if _host is not None:
                _host.kill()
            _host = ChildProcess()
        return _host


def running() -> bool:
    """Whether this process has a live child (:mod:`attnviz.runtime.child_start` starts none early then)."""
    with _host_lock:
        return _host is not None and _host.alive


def prestart(cuda: bool = False) -> None:
    """Start the child now, so that its interpreter and onnxruntime load while this process is still reading
    and instrumenting the model (a command that will run a model calls this first: the child's start-up,
    ~0.2 s, then overlaps the parent's work instead of following it).  ``cuda``: the model's sessions will ask
    for CUDA (:func:`attnviz.runtime.device.asks_cuda`), so a child started here makes the device's context on a
    thread from its start, as :func:`~attnviz.runtime.child_start.start_early`'s does (runtime/cuda_warm.py); a
    child already running keeps its own (its first CUDA session makes the context)."""
    if isolated():
        if cuda and not running():
            from attnviz.runtime.child_start import start_early

            start_early(cuda=True)  # taken over just below (ChildProcess: take_early)
        _current_host()


def take_trace() -> tuple[list[tuple[float, ...]], list[tuple[float, ...]]]:
    """With ``ATTNVIZ_TRACE=1`` set before the child started: the stamps of the runs since the last call, the
    parent's (called, request sent, reply received, returned) and the child's (request received, onnxruntime
    started, onnxruntime done, reply ready), one pair per run in order, on one monotonic clock
    (``time.perf_counter``: CLOCK_MONOTONIC on Linux, system-wide).  bench/engine_breakdown_bench.py reads them."""
    h = _host
    if h is None or h.trace is None:
        return [], []
    child = h.call("trace", what="reading the trace")
    with h.lock:
        parent, h.trace = h.trace, []
    return parent, child


def shutdown() -> None:
    """Stop the child (at exit, or in tests that want a fresh one)."""
    global _host
    with _host_lock:
        if _host is not None:
            _host.kill()
            _host = None


atexit.register(shutdown)


# -- the session proxy ------------------------------------------------------------------------------------
_sids = itertools.count(1)


class RemoteSession:
    """The part of ``onnxruntime.InferenceSession`` attnviz uses, backed by a session in the child."""

    def __init__(self, model: bytes | str, label: str, **kwargs):
        self._model = model  # kept to re-create the session when another model's crash restarted the child
        self._kwargs = kwargs
        self.label = label
        self._sid = next(_sids)
        self._host: ChildProcess | None = None
        self.crashed: str | None = None
        self.memory = MemoryCheck(model, label, kwargs.get("optimized"))
        self.note, self._providers, self._inputs, self._outputs = self._ensure()

    def _ensure(self):
        if self.crashed:
            raise ModelCrashed(self.crashed)
        for _ in range(2):  # a child that died before our request (another model's crash, a cancel): start anew
            host = _current_host()
            if self._host is host:
                return None
            try:
                desc = host.call("create", self._sid, self._model, self._kwargs, what="loading the model")
            except Dead:
                continue
            except ModelCrashed as e:
                self.crashed = str(e)
                raise
            except RemoteRunError as e:  # onnxruntime refused the graph
                raise AttnvizError(
                    f"{self.label}: onnxruntime cannot load this model: {ort_message(e)}; re-export it (or update onnxruntime)"
                ) from None
            self._host = host
            host.pin_state = None  # a CUDA session starts the child's page-locking
            return desc
        raise ModelCrashed("the model crashed onnxruntime: its process could not be started")

    def __del__(self):
        if self._host is not None:
            dropped.append(self._sid)

    def get_providers(self) -> list[str]:
        return list(self._providers)

    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def run(self, names, feeds, run_options=None) -> list[np.ndarray]:
        """Like ``InferenceSession.run`` (the child always binds outputs to reuse its slots).  Outputs over
        ``INLINE_BYTES`` are views onto shared memory that stays the caller's while any view of it is alive."""
        names = [o.name for o in self._outputs] if names is None else list(names)
        self.memory.check(feeds, names)
        for _ in range(2):
            if self._host is None or self._host is not _host or self.crashed:
                self._ensure()  # a dead child is found by the call below (Dead), not checked here first
            host = self._host
            assert host is not None  # _ensure either set it or raised
            try:
                return self._once(lambda: host.run(self._sid, names, dict(feeds)))
            except Dead:  # the child died before the run: once more in a new one
                continue
        raise ModelCrashed("the model crashed onnxruntime: its process could not be started")

    def run_bound(self, names, feeds) -> list[np.ndarray]:
        return self.run(names, feeds)

    def run_kept(self, names, feeds, values, hints) -> list[np.ndarray]:
        """A run fed ``values`` (input -> :class:`~attnviz.runtime.kept.KeptRef`: values the child keeps, bound
        where they are) and ``feeds`` (numpy); ``hints`` (output -> (dtype, shape)): what an output will be, so the
        child writes it straight into a slot.  No memory check: a head model's run is one head's rows."""
        host = self._attach()
        return self._once(
            lambda: host.run_kept(self._sid, list(names), dict(feeds), dict(values), dict(hints)),
            "computing a head's map",
        )

    def helper_memory(self) -> HelperMemory:
        """How this session holds memory in the child (:func:`attnviz.runtime.kept.helper_memory`)."""
        host = self._attach()
        return self._once(lambda: host.helper_memory(self._sid))

    def _once(self, call: Callable[[], _T], doing: str | None = None) -> _T:
        """``call`` (a request to this session's child), the session's state kept as the child answered.  A dead
        child: with ``doing``, this request's crash, so named (a kept-values run, a generation's chunk: what they
        need died with it); without, :class:`Dead` for the caller to send it again (:meth:`run`)."""
        try:
            return call()
        except Dead:
            self._host = None
            if doing is None:
                raise
            raise ModelCrashed(f"the model crashed onnxruntime while {doing}") from None
        except ModelCrashed as e:
            self.crashed = str(e)
            raise
        except RunCancelled:
            self._host = None  # the child was stopped; the session is re-created on the next run
            raise

    def pinned(self) -> str:
        """Whether the child's slots, which this session's outputs are bound into, are page-locked: ``"yes"`` or
        ``"no (why)"`` (runtime/pinning.py)."""
        host = self._attach()
        state = host.pin_state
        if state is None:
            state = host.pin_state = str(host.call("pinned", what="reading the page-locking state"))
        return state

    def _attach(self) -> ChildProcess:
        """The child this session lives in, created there first if that child is not the current one."""
        if self._host is None or self._host is not _host or self.crashed:
            self._ensure()
        assert self._host is not None  # _ensure either set it or raised
        return self._host

    def sid_on(self, other: RemoteSession) -> int:
        """This session's id in the child that runs ``other`` (created there first if the child restarted since):
        a generation loop beside ``other`` runs this session too (a VLM's embeddings)."""
        if other._host is None or other._host is not _host or other.crashed:
            other._ensure()
        self._ensure()
        if self._host is not other._host:
            raise AttnvizError("the model's process restarted while generating; generate again")
        return self._sid

    def steps(self, start, token: int, n: int, eos, budget: float):
        """A chunk of greedy cached steps, run in the child next to the session (``start``: a new generation's
        (plan, feeds, cache length), or None to go on with the one the child holds)."""
        if start is not None:
            self.memory.check(start[1], None)  # the first step's shapes; each later step adds one cache row
        if start is not None and (self._host is None or self._host is not _host or self.crashed):
            self._ensure()
        if self._host is None or self._host is not _host:
            raise AttnvizError("generation lost its cache (the model's process restarted); generate again")
        host = self._host
        return self._once(
            lambda: host.steps(self._sid, start, token, n, eos, budget), "generating; the model cannot be run"
        )


def run_chain(stages: list[tuple[RemoteSession, list[str], dict]]) -> list[list[np.ndarray]]:
    """Several sessions' runs as one request to the child (:mod:`attnviz.runtime.chain`): ``(session, fetch,
    feeds)`` per stage, a later stage's feed possibly a :class:`~attnviz.runtime.isolation.Spliced` or
    :class:`~attnviz.runtime.isolation.Taken` of earlier outputs.  Each stage passes its session's memory check
    first; returns each stage's outputs in fetch order."""
    for sess, names, feeds in stages:
        sess.memory.check(feeds, list(names))
    return _together(
        [s for s, _, _ in stages], lambda host: host.chain([(s._sid, list(names), dict(f)) for s, names, f in stages])
    )


def run_chain_steps(
    stages: list[tuple[RemoteSession, list[str], dict]], loop: RemoteSession, start: tuple, n: int, eos, budget: float
):
    """A chain (:func:`run_chain`) and, after it in the same request, a new generation's first chunk of greedy
    cached steps beside ``loop`` (:meth:`worker.Server.chain_steps`; ``start``: (plan, feeds, cache length,
    first, held, embed_sid), the feeds possibly :class:`~attnviz.runtime.isolation.Taken` of the chain's
    outputs).  Every stage and the loop's first step pass their memory checks first.  Returns (per stage its outputs in fetch order, ids
    with the first token, finished, {map output: the steps' rows})."""
    for sess, names, feeds in stages:
        sess.memory.check(feeds, list(names))
    loop.memory.check(start[1], None)  # the first step's shapes; each later step adds one cache row
    return _together(
        [*(s for s, _, _ in stages), loop],
        lambda host: host.chain_steps(
            [(s._sid, list(names), dict(f)) for s, names, f in stages], loop._sid, start, n, eos, budget
        ),
    )


def _together(sessions: list[RemoteSession], request: Callable[[ChildProcess], Any]):
    """``request`` sent to the child all ``sessions`` live in (each created there first where the child restarted;
    a child that died before the request ran is started again, once)."""
    for _ in range(2):
        try:
            host = sessions[0]._attach()
            if any(sess._attach() is not host for sess in sessions[1:]):
                raise Dead()  # the child died between two sessions' checks: all of them in the next one
            return request(host)
        except Dead:
            for sess in sessions:
                sess._host = None
            continue
        except ModelCrashed as e:
            for sess in sessions:
                sess.crashed = str(e)
            raise
        except RunCancelled:
            for sess in sessions:
                sess._host = None  # the child was stopped; the sessions are re-created on the next run
            raise
    raise ModelCrashed("the model crashed onnxruntime: its process could not be started")


def isolated() -> bool:
    return not os.environ.get("ATTNVIZ_INPROCESS")


def make_session(
    model: bytes | str,
    provider: str = "auto",
    threads: int | None = None,
    arena: bool = True,
    external_dir: str | None = None,
    label: str = "model",
    shared_arena: bool = True,
    finite: tuple[str, ...] = (),
    keep: tuple[str, ...] = (),
    optimized: GraphKey | None = None,
    helper: bool = False,
    plan: PlanHead | None = None,
):
    """Like :func:`attnviz.runtime.session.make_session` (``optimized`` and ``helper`` too), but the session runs in
    the child process; a helper shares the process's CPU arena there (runtime/arena.py), in-process too.
    ``finite``: the map outputs the child checks for NaN/Inf right after a chain's or a generation's run
    (:mod:`attnviz.runtime.finite`; in-process the parent checks them as before).

    ``shared_arena=False``: the session keeps an arena of its own
    instead of the child's shared one (see :meth:`attnviz.runtime.model.AttentionModel._session`).  ``keep``: outputs
    (an on-demand session's Q and Kᵀ) its runs leave on its device where ``ATTNVIZ_QK_DEVICE`` says so (``on``;
    ``auto`` where measured to pay), returned as handles a head model's run is fed (:mod:`attnviz.runtime.kept`).
    ``plan``: in-process, the memory check's plan head of ``model`` (bytes) kept by an earlier command
    (:class:`attnviz.runtime.guard.MemoryCheck`); the child reads the graph itself."""
    if provider not in PROVIDERS:  # argument errors need no child
        raise AttnvizError(f"unknown provider {provider!r}; use one of {', '.join(PROVIDERS)}")
    extra: dict[str, Any] = {}
    mode = keep_mode() if keep else "off"  # the switch read (and refused in one line) where the caller runs
    if not isolated():
        from attnviz.runtime import session as local  # onnxruntime is imported only where sessions run
        from attnviz.runtime.arena import process_arena

        sess, note = local.make_session(
            model,
            provider,
            threads,
            arena,
            external_dir,
            shared_arena=helper and arena and process_arena(),
            optimized=optimized,
            helper=helper,
        )
        memory = MemoryCheck(model, label, optimized, plan)
        return GuardedSession(sess, memory, keep if mode != "off" else (), mode), note
    if optimized is not None:
        extra["optimized"] = optimized
    if not shared_arena:
        extra["shared_arena"] = False
    if finite:
        extra["finite"] = list(finite)
    if helper:
        extra["helper"] = True
    if keep and mode != "off":
        extra["keep"] = (list(keep), mode)
    sess = RemoteSession(
        model, label, provider=provider, threads=threads, arena=arena, external_dir=external_dir, **extra
    )
    return sess, sess.note
