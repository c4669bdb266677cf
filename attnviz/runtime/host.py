"""Crash isolation: onnxruntime sessions live in a child process, so a native fault kills the child, not the app.

Untrusted models reach code paths in onnxruntime that abort the process (a 115-byte ONNX ``Attention`` with
``q_num_heads=0`` dies with SIGFPE while the session is created).  :func:`make_session` therefore returns a
:class:`RemoteSession` whose sessions are created and run in one long-lived child (spawned on first use and
kept across runs, so a run costs a pipe round trip, not a process start).  Large outputs come back in shared-memory
*slots* that both processes keep mapped and reuse (:mod:`attnviz.runtime.worker` has the ownership rule): the
caller gets numpy views onto them, and a slot goes back to the child only when no view of it is left.  Feeds
go the other way through a feed area the parent owns (:class:`_FeedArea`), never through the socket.

When the child dies the call raises :class:`ModelCrashed` ("the model crashed onnxruntime: ..."); the next
call starts a fresh child and re-creates the sessions of other models transparently.  A run whose caller was
cancelled (see :func:`cancel_scope`) kills the child, which really stops onnxruntime mid-run.

``ATTNVIZ_INPROCESS=1`` runs sessions in this process instead (debugging, profiling).
"""

from __future__ import annotations

import atexit
import ctypes
import itertools
import math
import mmap
import multiprocessing as mp
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz import AttnvizError
from attnviz.runtime import lifetime, shm
from attnviz.runtime.errors import Cancelled, ort_message
from attnviz.runtime.finite import note
from attnviz.runtime.isolation import (
    INLINE_BYTES,
    PROVIDERS,
    NodeArg,
    SharedFeed,
    SlotFeed,
    read_message,
    write_message,
)
from attnviz.runtime.worker import _slot_size, serve_orphanless

if TYPE_CHECKING:
    from attnviz.runtime.memory import MemoryPlan
    from attnviz.runtime.pinned_outputs import PinnedOutputs

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

POLL_S = 0.05  # how often a waiting call checks its caller's cancel flag


class ModelCrashed(AttnvizError):
    """The child running onnxruntime died (a native fault in the model's ops)."""


class RunCancelled(Cancelled):
    """The caller cancelled while onnxruntime was running; the child was stopped."""


class RemoteRunError(RuntimeError):
    """onnxruntime raised inside the child; the text is onnxruntime's own message."""


# -- cancellation scope (thread-local: each GUI worker thread has its own flag) -------------------------
_scope = threading.local()


@contextmanager
def cancel_scope(cancelled):
    """While inside, remote calls made by this thread poll ``cancelled()`` and stop the child when it is True."""
    prev = getattr(_scope, "check", None)
    _scope.check = cancelled
    try:
        yield
    finally:
        _scope.check = prev


def _cancel_requested() -> bool:
    check = getattr(_scope, "check", None)
    return bool(check is not None and check())


# -- the parent's handle on the child -------------------------------------------------------------------
class _Host:
    """One child process; requests are serialised by a lock (onnxruntime parallelises inside a run)."""

    def __init__(self):
        self.outdir = shm.make(_shm_dir())  # attnviz-host-<this pid>-XXXXXXXX; stale ones of dead owners go first
        if os.name == "posix":
            # a fresh interpreter running this module: unlike multiprocessing's spawn it never re-imports the
            # user's __main__ (a script without a main guard, stdin, a notebook), and a fork would copy Qt/torch
            mine, theirs = socket.socketpair()
            root = str(Path(__file__).resolve().parents[2])  # the attnviz this process uses, not another install
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
            env.update(_huge_pages_env(os.environ))
            # the child dies with this process (runtime/lifetime.py): it watches `watch`, whose other end only
            # this process holds; the Linux parent-death signal only when spawned from the main thread
            watch, self.lifeline = lifetime.lifeline()
            main = "1" if threading.current_thread() is threading.main_thread() else "0"
            script = str(Path(__file__).with_name("worker.py"))
            args = [str(theirs.fileno()), self.outdir, str(watch), str(os.getpid()), main]
            self.proc: _Popen | _MpProcess = _Popen(
                [sys.executable, script, *args], pass_fds=(theirs.fileno(), watch), stdin=subprocess.DEVNULL, env=env
            )
            theirs.close()
            os.close(watch)
            self.conn = Connection(mine.detach())
        else:  # pragma: no cover - Windows has no pass_fds
            ctx = mp.get_context("spawn")
            self.conn, child = ctx.Pipe()
            self.lifeline = -1  # the child watches multiprocessing's parent sentinel instead
            self.proc = _MpProcess(
                ctx.Process(target=serve_orphanless, args=(child, self.outdir, os.getpid()), daemon=True)
            )
            child.close()
        self.lock = threading.Lock()
        self.poller = None
        self.read: Callable[[], bytes | memoryview] = self.conn.recv_bytes
        self.write: Callable[[bytes], None] = self.conn.send_bytes
        if hasattr(select, "poll"):  # posix: the socket's descriptor, written, read and polled directly
            fd = self.conn.fileno()
            self.poller = select.poll()
            self.poller.register(fd, select.POLLIN)
            self.read, self.write = (lambda: read_message(fd)), (lambda data: write_message(fd, data))
        self.generation = next(_generations)
        self.maps: dict[int, mmap.mmap] = {}  # the child's slots, mapped once each and kept
        # slots lent to callers, each with a weak reference to the object every view of it keeps alive; read
        # and changed only under ``lock`` (a run request hands back those whose object is gone)
        self.lent: list[tuple[weakref.ref, int]] = []
        # the arrays lend() made, by id: (a weak reference to the array, its slot), so that one fed back whole to
        # a generation's start goes as its slot (SlotFeed); pruned with the lent slots
        self.lent_arrays: dict[int, tuple[weakref.ref[np.ndarray], int]] = {}
        self.feed_area = _FeedArea(self.outdir)
        # ATTNVIZ_TRACE=1 (read here and by the child): per run, (called, request sent, reply received, returned)
        self.trace: list[tuple[float, ...]] | None = [] if os.environ.get("ATTNVIZ_TRACE") == "1" else None
        # the child's answer to "are the slots page-locked" (runtime/pinning.py), asked again only after a reply
        # that made slots or a session created (the only times it can change): no round trip on a repeated run
        self.pin_state: str | None = None

    def _readable(self) -> bool:
        """Wait up to POLL_S for the child's reply (or its end).  One poll object per host, made once:
        ``Connection.poll`` builds a selector per call, which cost ~20 us of every run's return trip."""
        if self.poller is None:
            return self.conn.poll(POLL_S)
        return bool(self.poller.poll(POLL_S * 1000))

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, sid: int, names: list[str], feeds: dict) -> list[np.ndarray]:
        """One run in the child; large outputs are views onto its slots, lent until the caller drops them."""
        return self.call("run", sid, names, feeds, adopt=self._adopt, prepare=self._prepare_run)

    def chain(self, stages: list[tuple[int, list[str], dict]]) -> list[list[np.ndarray]]:
        """Sessions' runs as one request (:meth:`worker.Server.chain`): every stage's feeds go into the feed area
        together, and every stage's outputs come back, large ones as views onto the child's slots."""

        def prepare(args: tuple) -> tuple:
            (stages,) = args
            shared = self.feed_area.share({(i, k): v for i, (_, _, f) in enumerate(stages) for k, v in f.items()})
            return [(sid, names, {k: shared[(i, k)] for k in f}) for i, (sid, names, f) in enumerate(stages)], (
                self._hand_back()
            )

        def adopt(reply) -> list[list[np.ndarray]]:
            per_stage, finite, created, deleted = reply
            flat = iter(self._adopt(([it for items in per_stage for it in items], created, deleted)))
            values = [[next(flat) for _ in items] for items in per_stage]
            _note_finite(stages, values, finite)
            return values

        return self.call("chain", stages, adopt=adopt, prepare=prepare)

    def steps(self, sid: int, start, token: int, n: int, eos, budget: float):
        """A chunk of cached generation steps run in the child (:meth:`worker.Server.steps`): (ids, finished,
        {map output: array})."""

        def prepare(args: tuple) -> tuple:
            sid, start, *rest = args
            if start is not None:
                plan, feeds, length, embed_sid = start
                start = (plan, self.feed_area.share(self._own_slots(feeds)), length, embed_sid)
            return (sid, start, *rest, self._hand_back())

        def adopt(reply) -> tuple:
            ids, finished, names, items, finite, created, deleted = reply
            maps = dict(zip(names, self._adopt((items, created, deleted))))
            for k, ok in finite.items():
                note(maps[k], ok)
            return ids, finished, maps

        return self.call("steps", sid, start, token, n, eos, budget, what="generating", adopt=adopt, prepare=prepare)

    def chain_steps(
        self, stages: list[tuple[int, list[str], dict]], sid: int, start: tuple, n: int, eos, budget: float
    ):
        """A chain and a new generation's first chunk after it, as one request (:meth:`worker.Server.chain_steps`):
        (per stage its outputs, None for those held, ids, finished, {map output: array}); ``start``: (plan,
        feeds, cache length, first, the (stage, output) pairs held in the child, the id of the session each token
        goes through first or None)."""

        def prepare(args: tuple) -> tuple:
            stages, sid, (plan, feeds, length, first, held, embed_sid), *rest = args
            both = {(i, k): v for i, (_, _, f) in enumerate(stages) for k, v in f.items()}
            both.update({(-1, k): v for k, v in self._own_slots(feeds).items()})
            shared = self.feed_area.share(both)
            stages = [(s, names, {k: shared[(i, k)] for k in f}) for i, (s, names, f) in enumerate(stages)]
            start = (plan, {k: shared[(-1, k)] for k in feeds}, length, first, held, embed_sid)
            return (stages, sid, start, *rest, self._hand_back())

        def adopt(reply) -> tuple:
            ids, finished, names, items, finite, per_stage, stage_finite, created, deleted = reply
            flat = iter(self._adopt(([*items, *(it for stage in per_stage for it in stage)], created, deleted)))
            maps = {k: next(flat) for k in names}
            for k, ok in finite.items():
                note(maps[k], ok)
            values = [[next(flat) for _ in stage] for stage in per_stage]
            _note_finite(stages, values, stage_finite)
            return values, ids, finished, maps

        return self.call(
            "chain_steps", stages, sid, start, n, eos, budget, what="generating", adopt=adopt, prepare=prepare
        )

    def _own_slots(self, feeds: dict) -> dict:
        """Feeds that are arrays lend() made (the child's outputs, whole) as their slots: no copy either way.
        Under the lock, before ``_hand_back``: the feeds hold the arrays, so their slots are not handed back."""
        out = dict(feeds)
        for k, v in feeds.items():
            got = self.lent_arrays.get(id(v))
            if got is not None and isinstance(v, np.ndarray):
                feed = SlotFeed(got[1], v.dtype.str, tuple(v.shape))
                if got[0]() is v:  # the very array lent (an id alone may be a later object's)
                    out[k] = feed
        return out

    def _prepare_run(self, args: tuple) -> tuple:
        """Under the lock: large feeds go into the feed area, and the request carries the slots to hand back."""
        sid, names, feeds = args
        return sid, names, self.feed_area.share(feeds), self._hand_back()

    def _hand_back(self) -> list[int]:
        """The lent slots no array views any more (under the lock: a slot is handed back exactly once).

        Weak references polled here, at the next request, rather than a finaliser per view: the child can only
        reuse a slot once it is told, which happens with the next request anyway, and a finaliser costs ~12 us
        per output (7 a run on MiniLM) where a weak reference costs ~1 us."""
        still: list[tuple[weakref.ref, int]] = []
        free: list[int] = []
        for ref, slot in self.lent:
            if ref() is not None:
                still.append((ref, slot))
            else:
                free.append(slot)
        self.lent = still
        if free:
            gone = set(free)
            self.lent_arrays = {k: e for k, e in self.lent_arrays.items() if e[1] not in gone and e[0]() is not None}
        return free

    def _adopt(self, reply) -> list[np.ndarray]:
        """Map the slots the child created, unmap those it deleted, and wrap the items (under the lock, so that
        replies are applied in the order the child sent them)."""
        items, created, deleted = reply
        if created:
            self.pin_state = None
        for i in deleted:
            mm = self.maps.pop(i, None)
            if mm is not None:
                _close(mm)
        for i, name, size in created:
            fd = os.open(os.path.join(self.outdir, name), os.O_RDWR)
            try:  # MAP_POPULATE maps every page now: no page fault when the maps are read
                self.maps[i] = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
            finally:
                os.close(fd)
        lent: dict[int, np.ndarray] = {}  # a name fetched twice is one slot: one owner, one weak reference
        for item in items:
            if item[0] == "slot" and item[1] not in lent:
                lent[item[1]] = self.lend(*item[1:])
        return [lent[item[1]] if item[0] == "slot" else item[1] for item in items]

    def lend(self, slot: int, dtype: str, shape: tuple) -> np.ndarray:
        """An array viewing a slot.  Every view numpy derives from it keeps ``owner`` alive (through the buffer
        it was made from), so its weak reference dies only with the last of them; the next request then hands
        the slot back."""
        dt = np.dtype(dtype)
        n = math.prod(shape)
        owner = (ctypes.c_char * (n * dt.itemsize)).from_buffer(self.maps[slot])
        self.lent.append((weakref.ref(owner), slot))
        arr = np.frombuffer(owner, dt, n).reshape(shape)
        self.lent_arrays[id(arr)] = (weakref.ref(arr), slot)
        return arr

    def call(self, op: str, *args, what: str = "running the model", adopt=None, prepare=None):
        t0 = time.perf_counter()
        while not self.lock.acquire(timeout=POLL_S):
            if _cancel_requested():
                raise RunCancelled("cancelled")
        try:
            if not self.alive:
                raise _Dead()
            self._close_dropped()
            if prepare is not None:
                args = prepare(args)
            try:
                self.write(pickle.dumps((op, args), pickle.HIGHEST_PROTOCOL))
            except (OSError, ValueError) as e:
                raise _Dead() from e
            t1 = time.perf_counter()
            while not self._readable():
                if _cancel_requested():
                    self.kill()
                    raise RunCancelled("cancelled")  # the GUI shows "Cancelled.", not an error
                if not self.alive and not self.conn.poll(0):
                    raise ModelCrashed(
                        f"the model crashed onnxruntime: {self._death()} while {what}; the model cannot be run"
                    )
            try:
                status, reply = pickle.loads(self.read())
            except (EOFError, OSError):
                self.proc.wait(1)
                raise ModelCrashed(
                    f"the model crashed onnxruntime: {self._death()} while {what}; the model cannot be run"
                ) from None
            if status == "ok" and adopt is not None:
                t2 = time.perf_counter()
                out = adopt(reply)
                if self.trace is not None:
                    self.trace.append((t0, t1, t2, time.perf_counter()))
                return out
        finally:
            self.lock.release()
        if status == "ok":
            return reply
        if status == "attnviz":
            raise AttnvizError(reply)
        raise RemoteRunError(reply)

    def _close_dropped(self) -> None:
        """Free the child's sessions whose proxies were garbage-collected (their __del__ only queues the id:
        it may run on a thread that holds this lock)."""
        sids = []
        while _dropped:
            try:
                sids.append(_dropped.pop())
            except IndexError:
                break
        if sids:
            try:
                self.conn.send(("close", (sids,)))
                self.conn.recv()
            except (OSError, EOFError, ValueError):
                raise _Dead() from None

    def _death(self) -> str:
        self.proc.wait(2)
        code = self.proc.returncode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"the process was killed by {name}"
        return f"the process exited with code {code}"

    def kill(self) -> None:
        if self.alive:
            self.proc.kill()
        self.proc.wait(5)
        self.conn.close()
        if self.lifeline >= 0:
            os.close(self.lifeline)
            self.lifeline = -1
        for mm in self.maps.values():
            _close(mm)  # slots still lent stay mapped until their arrays are gone (the files go now)
        self.maps.clear()
        self.feed_area.close()
        shm.release(self.outdir)


def _huge_pages_env(environ) -> dict[str, str]:
    """``ATTNVIZ_HUGEPAGES=1``: the child's malloc asks for transparent huge pages (glibc >= 2.35
    ``glibc.malloc.hugetlb=1``: madvise on its mappings), so onnxruntime's packed weights and arena sit in 2 MB
    pages.  Off by default since session 9: it saved ~3-4 % of CPU per MiniLM run at 512 tokens, but where THP
    defrags on madvise (the Debian/Ubuntu default) every new 2 MB page of a long input's attention scores is
    compacted for: at 4,096 tokens the child's first runs spent 6 s and 4 s of system time (a plain process 0.7 s)
    and its steady runs were 5.2 s against 4.6 s without (bench/RESULTS.md, "On-demand at 4,096 tokens").  A
    tunable the user set already wins."""
    if environ.get("ATTNVIZ_HUGEPAGES") != "1" or not sys.platform.startswith("linux"):
        return {}
    have = environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb" in have:
        return {}
    return {"GLIBC_TUNABLES": ":".join(t for t in (have, "glibc.malloc.hugetlb=1") if t)}


class _FeedArea:
    """A shared-memory file the parent owns for the feeds (numpy arrays), so that they reach the child without
    pickling and without a socket that moves 1 MB in ~200 kB turns, each a wake-up of the other process (a head
    recompute at 512 tokens spent most of its time there).  Small feeds (token ids) go there too: a run on the
    same shapes then puts each feed at the same place, and the child's kept I/O binding, which already points
    there, needs no rebinding (two ``bind_input`` calls and the feeds' pickling were ~10 % of isolation's
    fixed cost per run).  Written only under the host's lock, before the request is sent: the child reads it
    during that run alone, so one area is reused by every run.  It grows (a new file, the old one dropped)
    when a run's feeds do not fit."""

    ALIGN = 64

    def __init__(self, outdir: str):
        self.outdir = outdir
        self.names = itertools.count(1)
        self.file: str | None = None
        self.mm: mmap.mmap | None = None

    def share(self, feeds: dict) -> dict:
        shared = {k: v for k, v in feeds.items() if isinstance(v, np.ndarray) and not v.dtype.hasobject}
        if not shared or os.name != "posix":
            return feeds
        need = sum(-(-v.nbytes // self.ALIGN) * self.ALIGN for v in shared.values())
        if (self.mm is None or len(self.mm) < need) and not self._grow(need):
            return feeds  # shared memory full: the feeds travel through the socket as before
        assert self.mm is not None and self.file is not None
        out = dict(feeds)
        at = 0
        for k, v in shared.items():
            dst = np.frombuffer(self.mm, v.dtype, v.size, at).reshape(v.shape)
            np.copyto(dst, v)
            del dst
            out[k] = SharedFeed(self.file, at, v.dtype.str, tuple(v.shape))
            at += -(-v.nbytes // self.ALIGN) * self.ALIGN
        return out

    def _grow(self, need: int) -> bool:
        self.close()
        size = _slot_size(need)
        name = f"feeds-{next(self.names)}"
        path = os.path.join(self.outdir, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError:
            return False
        try:
            try:  # reserve the pages now: a full tmpfs fails here, not with a SIGBUS while writing
                if hasattr(os, "posix_fallocate"):
                    os.posix_fallocate(fd, 0, size)
                else:
                    os.ftruncate(fd, size)
            except OSError:
                os.unlink(path)
                return False
            self.mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
        finally:
            os.close(fd)
        self.file = name
        return True

    def close(self) -> None:
        if self.mm is not None:
            _close(self.mm)
            self.mm = None
        if self.file is not None:
            try:  # the child keeps its mapping until it sees the next file's name; the pages go with it
                os.unlink(os.path.join(self.outdir, self.file))
            except OSError:
                pass
            self.file = None


def _close(mm: mmap.mmap) -> None:
    try:
        mm.close()
    except BufferError:  # arrays still view it: it is unmapped when the last of them is collected
        pass


class _Popen(subprocess.Popen):
    def wait(self, timeout=None):
        try:
            return super().wait(timeout)
        except subprocess.TimeoutExpired:
            return None


class _MpProcess:  # pragma: no cover - the Popen interface over a multiprocessing.Process (Windows)
    def __init__(self, p):
        self.p = p
        p.start()
        self.pid = p.pid

    def poll(self):
        return self.p.exitcode

    def wait(self, timeout=None):
        self.p.join(timeout)
        return self.p.exitcode

    def kill(self):
        self.p.kill()

    @property
    def returncode(self):
        return self.p.exitcode


class _Dead(Exception):
    pass


_generations = itertools.count(1)
_dropped: list[int] = []  # session ids whose proxies are gone (list.append/pop are atomic)
_host: _Host | None = None
_host_lock = threading.Lock()


def _current_host() -> _Host:
    global _host
    with _host_lock:
        if _host is None or not _host.alive:
            if _host is not None:
                _host.kill()
            _host = _Host()
        return _host


def prestart() -> None:
    """Start the child now, so that its interpreter and onnxruntime load while this process is still reading
    and instrumenting the model (a command that will run a model calls this first: the child's start-up,
    ~0.2 s, then overlaps the parent's work instead of following it)."""
    if isolated():
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


def _shm_dir() -> str | None:
    d = "/dev/shm"
    return d if os.path.isdir(d) and os.access(d, os.W_OK) else None


# -- the session proxy ------------------------------------------------------------------------------------
_sids = itertools.count(1)


class RemoteSession:
    """The part of ``onnxruntime.InferenceSession`` attnviz uses, backed by a session in the child."""

    def __init__(self, model: bytes | str, label: str, **kwargs):
        self._model = model  # kept to re-create the session when another model's crash restarted the child
        self._kwargs = kwargs
        self.label = label
        self._sid = next(_sids)
        self._host: _Host | None = None
        self.crashed: str | None = None
        self.memory = MemoryCheck(model, label)
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
            except _Dead:
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
            _dropped.append(self._sid)

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
                self._ensure()  # a dead child is found by the call below (_Dead), not checked here first
            assert self._host is not None  # _ensure either set it or raised
            try:
                return self._host.run(self._sid, names, dict(feeds))
            except _Dead:
                self._host = None
                continue
            except ModelCrashed as e:
                self.crashed = str(e)
                raise
            except RunCancelled:
                self._host = None  # the child was stopped; the session is re-created on the next run
                raise
        raise ModelCrashed("the model crashed onnxruntime: its process could not be started")

    def run_bound(self, names, feeds) -> list[np.ndarray]:
        return self.run(names, feeds)

    def pinned(self) -> str:
        """Whether the child's slots, which this session's outputs are bound into, are page-locked: ``"yes"`` or
        ``"no (why)"`` (runtime/pinning.py)."""
        host = self._attach()
        state = host.pin_state
        if state is None:
            state = host.pin_state = str(host.call("pinned", what="reading the page-locking state"))
        return state

    def _attach(self) -> _Host:
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
        try:
            return self._host.steps(self._sid, start, token, n, eos, budget)
        except _Dead:
            self._host = None
            raise ModelCrashed("the model crashed onnxruntime while generating; the model cannot be run") from None
        except ModelCrashed as e:
            self.crashed = str(e)
            raise
        except RunCancelled:
            self._host = None
            raise


def _note_finite(stages: list, values: list[list], finite: list[dict[str, bool]]) -> None:
    """The child's NaN/Inf verdict per stage and map output, noted beside the arrays lent from its reply."""
    for (_, names, _), got, checked in zip(stages, values, finite):
        for k, ok in checked.items():
            note(got[names.index(k)], ok)


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


def _together(sessions: list[RemoteSession], request: Callable[[_Host], Any]):
    """``request`` sent to the child all ``sessions`` live in (each created there first where the child restarted;
    a child that died before the request ran is started again, once)."""
    for _ in range(2):
        try:
            host = sessions[0]._attach()
            if any(sess._attach() is not host for sess in sessions[1:]):
                raise _Dead()  # the child died between two sessions' checks: all of them in the next one
            return request(host)
        except _Dead:
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


class MemoryCheck:
    """A session's memory check before each run (:func:`attnviz.runtime.memory.check_run`); the model's
    structure is read on the first run, not when the session opens."""

    def __init__(self, model: bytes | str, label: str):
        self._model: bytes | str | None = model
        self._plan: MemoryPlan | None = None
        self.label = label

    def check(self, feeds: dict, names: list[str] | None) -> None:
        from attnviz.runtime import memory  # onnx's shape inference, imported where sessions run

        if self._plan is None:
            assert self._model is not None
            self._plan = memory.MemoryPlan(self._model)
            self._model = None  # the plan keeps the structure; the bytes stay with the session's owner
        memory.check_run(self._plan, feeds, names, self.label)


class GuardedSession:
    """An in-process ``onnxruntime.InferenceSession`` (``ATTNVIZ_INPROCESS=1``: corpus workers, Ray actors)
    whose runs pass the same memory check as the child's; anything else goes to the session itself."""

    def __init__(self, sess, memory: MemoryCheck):
        self._sess = sess
        self.memory = memory
        self.unguarded = sess  # for a loop that checked its first step's shapes itself (model.run_loop)
        # on CUDA: its large outputs go into page-locked buffers (runtime/pinned_outputs.py); never looked at on CPU
        self.outputs: PinnedOutputs | None = None
        if sess.get_providers()[:1] == ["CUDAExecutionProvider"]:
            from attnviz.runtime.pinned_outputs import PinnedOutputs, shared_buffers

            self.outputs = PinnedOutputs(shared_buffers())

    def __getattr__(self, name: str):
        return getattr(self._sess, name)

    def run(self, names, feeds, run_options=None) -> list:
        self.memory.check(feeds, None if names is None else list(names))
        return self._sess.run(names, feeds, run_options)

    def pinned(self) -> str:
        """Whether this session's large outputs go into page-locked buffers: ``"yes"`` or ``"no (why)"``."""
        return self.outputs.buffers.pinner.state if self.outputs is not None else "no (not a CUDA session)"

    def run_bound(self, names, feeds) -> list:
        """Like :meth:`RemoteSession.run_bound`: outputs bound to onnxruntime-allocated host buffers."""
        self.memory.check(feeds, list(names))
        if self.outputs is not None:
            return self.outputs.run(self._sess, list(names), feeds)
        io = self._sess.io_binding()
        for k, v in feeds.items():
            io.bind_cpu_input(k, np.ascontiguousarray(v))
        for n in names:
            io.bind_output(n, "cpu")
        self._sess.run_with_iobinding(io)
        return [o.numpy() for o in io.get_outputs()]


def isolated() -> bool:
    return not os.environ.get("ATTNVIZ_INPROCESS")


def make_session(
    model: bytes | str,
    provider: str = "auto",
    threads: int | None = None,
    arena: bool = True,
    external_dir: str | None = None,
    label: str = "model",
    initializers=None,
    shared_arena: bool = True,
    finite: tuple[str, ...] = (),
):
    """Like :func:`attnviz.runtime.session.make_session`, but the session runs in the child process.
    ``finite``: the map outputs the child checks for NaN/Inf right after a chain's or a generation's run
    (:mod:`attnviz.runtime.finite`; in-process the parent checks them as before).

    ``initializers``: (names, values) the graph needs but does not contain; values are numpy arrays or
    OrtValues (sent to the child as arrays).  ``shared_arena=False``: the session keeps an arena of its own
    instead of the child's shared one (see :meth:`attnviz.runtime.model.AttentionModel._session`)."""
    if provider not in PROVIDERS:  # argument errors need no child
        raise AttnvizError(f"unknown provider {provider!r}; use one of {', '.join(PROVIDERS)}")
    extra: dict[str, Any] = {}
    if initializers and initializers[0]:
        names, values = initializers
        extra["initializers"] = (list(names), [v.numpy() if hasattr(v, "numpy") else np.asarray(v) for v in values])
    if not isolated():
        from attnviz.runtime import session as local  # onnxruntime is imported only where sessions run

        sess, note = local.make_session(
            model, provider, threads, arena, external_dir, **({"initializers": initializers} if extra else {})
        )
        return GuardedSession(sess, MemoryCheck(model, label)), note
    if not shared_arena:
        extra["shared_arena"] = False
    if finite:
        extra["finite"] = list(finite)
    sess = RemoteSession(
        model, label, provider=provider, threads=threads, arena=arena, external_dir=external_dir, **extra
    )
    return sess, sess.note
