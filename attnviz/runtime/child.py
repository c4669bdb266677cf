"""The parent's handle on the crash-isolation child (:mod:`attnviz.runtime.host` keeps the one in use): the
process started and watched, one request at a time with the feeds in the feed area, the slots of its replies
mapped and lent to callers until no view of them is left, a cancel or the child's death noticed while waiting."""

from __future__ import annotations

import ctypes
import itertools
import math
import mmap
import multiprocessing as mp
import os
import pickle
import select
import signal
import threading
import time
import weakref
from collections.abc import Callable
from contextlib import contextmanager
from multiprocessing.connection import Connection
from typing import NamedTuple

import numpy as np

from attnviz import AttnvizError
from attnviz.runtime import shm
from attnviz.runtime.child_start import _Forked, _Popen, huge_pages_env, shm_dir, spawn, take_early  # noqa: F401  (re-exported)
from attnviz.runtime.errors import Cancelled
from attnviz.runtime.feedarea import FeedArea
from attnviz.runtime.finite import note
from attnviz.runtime.isolation import SharedFeed, SlotFeed, read_message, write_message
from attnviz.runtime.kept import HelperMemory, KeptRef
from attnviz.runtime.slots import close_map

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
class ChildProcess:
    """One child process; requests are serialised by a lock (onnxruntime parallelises inside a run)."""

    def __init__(self):
        if os.name == "posix":
            # the process a command started before its imports (child_start.start_early), else a new one
            started = take_early() or spawn()
            self.outdir, self.lifeline = started.outdir, started.lifeline
            self.proc: _Popen | _Forked | _MpProcess = started.proc
            self.conn = Connection(started.fd)
        else:  # pragma: no cover - Windows has no pass_fds
            from attnviz.runtime.worker import serve_orphanless  # (here only: the child's modules, not the parent's)

            self.outdir = shm.make(shm_dir())
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
        self.feed_area = FeedArea(self.outdir)
        # ATTNVIZ_TRACE=1 (read here and by the child): per run, (called, request sent, reply received, returned)
        self.trace: list[tuple[float, ...]] | None = [] if os.environ.get("ATTNVIZ_TRACE") == "1" else None
        # the child's answer to "are the slots page-locked" (runtime/pinning.py), asked again only after a reply
        # that made slots or a session created (the only times it can change): no round trip on a repeated run
        self.pin_state: str | None = None
        # ids of values the child keeps for this process (runtime/kept.py) whose KeptRef was collected: sent
        # ahead of the next request, so the child drops them (appended from finalizers: list.append is atomic)
        self.forget: list[int] = []
        # per session: its last run request and, once it succeeded, its reply's items (see run)
        self.last_run: dict[int, _LastRun] = {}
        self.next_kid = -1  # the ids this process gives the values a repeated run keeps (see run)

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
        """One run in the child; large outputs are views onto its slots, lent until the caller drops them.

        A run of ``sid`` with the output names of its last run and feeds that land at the same places of the feed
        area (the same dtypes and shapes) goes as ("again", sid, slots handed back, first kept id): the child runs
        what it holds of that request.  Where the last run's slots and kept values are free again (the caller
        dropped its result) the child repeats it as it was (``worker.Server._repeat``), keeping its values under
        the ids given here, and replies ("again", None); its outputs are made here from the last reply's items
        (:class:`_LastRun`) while the child runs, so neither side pickles the names, feeds or items of an
        unchanged run and nothing but the reply's wake-up stands between onnxruntime's end and the return."""
        return self.call(
            "run", sid, names, feeds, adopt=lambda reply: self._adopt_run(sid, reply), prepare=self._prepare_run
        )

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

    def run_kept(self, sid: int, names: list[str], feeds: dict, values: dict[str, KeptRef], hints: dict) -> list:
        """A run of ``sid`` (a site's head model, :meth:`worker_kept.KeptRequests.run_kept`) fed the values the child
        keeps for ``values`` and ``feeds`` from here; outputs as :meth:`run` gives them."""
        for v in values.values():
            if v.host is not self:
                raise AttnvizError(
                    "this on-demand result's Q and Kᵀ were lost when the model's process restarted; run the model again"
                )

        def prepare(args: tuple) -> tuple:
            sid, names, feeds, values, hints = args
            kids = {k: v.kid for k, v in values.items()}
            return sid, names, self.feed_area.share(feeds), kids, hints, self._hand_back()

        return self.call(
            "run_kept",
            sid,
            names,
            feeds,
            values,
            hints,
            what="computing a head's map",
            adopt=self._adopt,
            prepare=prepare,
        )

    def helper_memory(self, sid: int) -> HelperMemory:
        """How the child's session ``sid`` holds memory (:func:`attnviz.runtime.kept.helper_memory`)."""
        return HelperMemory(*self.call("helper_memory", sid, what="reading a session's memory settings"))

    def kept_count(self) -> int:
        """How many values the child keeps for this process (runtime/kept.py), after those dropped here are gone."""
        return int(self.call("kept", what="counting kept values"))

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

    def _prepare_run(self, args: tuple) -> tuple | _Message:
        """Under the lock: large feeds go into the feed area, and the request carries the slots to hand back (as an
        "again" where it repeats the last run request of its session, see :meth:`run`)."""
        sid, names, feeds = args
        shared = self.feed_area.share(feeds)
        last = self.last_run.get(sid)
        if last is not None and last.items is not None and last.names == names and last.feeds == shared:
            first = self.next_kid  # ids for its kept values: negative, never one the child gives (from 1 up)
            self.next_kid -= last.kept
            free = last.free(self)  # before the hand back: a slot still lent here is one the child will not reuse
            message = ("again", (sid, self._hand_back(), first))
            return _Message(message, lambda: last.outputs(self, first), free)
        every = all(type(v) is SharedFeed for v in shared.values())  # else no "again": arrays do not compare
        self.last_run[sid] = _LastRun(list(names), shared if every else None)
        return sid, names, shared, self._hand_back()

    def _adopt_run(self, sid: int, reply) -> list:
        """A run's reply adopted (:meth:`_adopt`), its items kept for the next "again"."""
        out = self._adopt(reply)
        last = self.last_run.get(sid)
        if last is not None and last.feeds is not None:
            last.learn(reply[0], out)
        return out

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

    def _adopt(self, reply) -> list:  # arrays, and KeptRef where the child kept a value on its device
        """Map the slots the child created, unmap those it deleted, and wrap the items (under the lock, so that
        replies are applied in the order the child sent them)."""
        items, created, deleted = reply
        if created:
            self.pin_state = None
        for i in deleted:
            mm = self.maps.pop(i, None)
            if mm is not None:
                close_map(mm)
        for i, name, size in created:
            fd = os.open(os.path.join(self.outdir, name), os.O_RDWR)
            try:  # MAP_POPULATE maps every page now: no page fault when the maps are read
                self.maps[i] = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
            finally:
                os.close(fd)
        lent: dict[int, np.ndarray] = {}  # a name fetched twice is one slot: one owner, one weak reference
        held: dict[int, KeptRef] = {}  # likewise a value kept on the child's device (runtime/kept.py)
        for item in items:
            if item[0] == "slot" and item[1] not in lent:
                lent[item[1]] = self.lend(*item[1:4])
            elif item[0] == "kept" and item[1] not in held:
                held[item[1]] = KeptRef(self, *item[1:])
        return [
            _part(lent[item[1]], item) if item[0] == "slot" else held[item[1]] if item[0] == "kept" else item[1]
            for item in items
        ]

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
                raise Dead()
            self._close_dropped()
            if prepare is not None:
                args = prepare(args)
            ahead = args if isinstance(args, _Message) else None
            message = ahead.message if ahead is not None else (op, args)
            if self.forget:  # values the child keeps that nothing here holds any more: dropped before the request
                kids = [self.forget.pop() for _ in range(len(self.forget))]
                message = ("forget_then", (kids, *message))
            try:
                self.write(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))
            except (OSError, ValueError) as e:
                raise Dead() from e
            t1 = time.perf_counter()
            # a repeated run's outputs, made while the child runs it (see run); given up if it does not repeat
            made = ahead.make() if ahead is not None and ahead.now else None
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
            if status == "again":  # the child repeated the last run (see run)
                assert ahead is not None  # the child says "again" only to an "again"
                t2 = time.perf_counter()
                out = (made or ahead.make()).outputs
                if self.trace is not None:
                    self.trace.append((t0, t1, t2, time.perf_counter()))
                return out
            if made is not None:
                made.give_up()
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
        while dropped:
            try:
                sids.append(dropped.pop())
            except IndexError:
                break
        if sids:
            for sid in sids:
                self.last_run.pop(sid, None)
            try:
                self.conn.send(("close", (sids,)))
                self.conn.recv()
            except (OSError, EOFError, ValueError):
                raise Dead() from None

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
            close_map(mm)  # slots still lent stay mapped until their arrays are gone (the files go now)
        self.maps.clear()
        self.feed_area.close()
        shm.release(self.outdir)


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


class Dead(Exception):
    pass


class _Message(NamedTuple):
    """A run request made whole by ``prepare`` (an "again", see :meth:`ChildProcess.run`), sent as it is; ``make``
    makes its outputs should the child repeat the run, ahead of the reply where ``now`` says it likely will."""

    message: tuple
    make: Callable[[], _Made]
    now: bool


class _Made(NamedTuple):
    """A repeated run's outputs made ahead of the reply, and the slots they lent: the entries :meth:`give_up`
    takes back where the child did not repeat the run after all (its reply then lends what it says)."""

    outputs: list
    host: ChildProcess
    lent: list[tuple[weakref.ref, int]]

    def give_up(self) -> None:
        mine = {id(e) for e in self.lent}
        self.host.lent = [e for e in self.host.lent if id(e) not in mine]
        for v in self.outputs:
            self.host.lent_arrays.pop(id(v), None)
        self.outputs.clear()  # nothing views the slots: a slot the reply deletes is unmapped at once


class _LastRun:
    """A session's last run request (its output names, its feeds as they lay in the feed area, None where one did
    not) and the items of its reply, laid out to make a repeat's outputs: per item ("slot", slot id, dtype, shape)
    or ("kept", which of the kept values, in the order the child numbers them, dtype, shape).  None until a reply
    to it came, and for a reply with items that change run to run (inline outputs)."""

    __slots__ = ("names", "feeds", "items", "kept", "slots", "held")

    def __init__(self, names: list[str], feeds: dict | None):
        self.names, self.feeds = names, feeds
        self.items: list[tuple] | None = None
        self.kept = 0
        self.slots: frozenset[int] = frozenset()
        self.held: list[weakref.ref] = []  # the last outputs' KeptRefs: a repeat needs them all dropped

    def learn(self, items: list, out: list) -> None:
        """The items of a reply to this request (and the outputs made of them)."""
        order: dict[int, int] = {}  # kept id -> its place among the run's kept values (the child's order)
        laid = []
        for it in items:
            if len(it) != 4 or it[0] not in ("slot", "kept"):
                self.items = None
                return
            if it[0] == "kept":
                laid.append(("kept", order.setdefault(it[1], len(order)), it[2], it[3]))
            else:
                laid.append(it)
        self.items, self.kept = laid, len(order)
        self.slots = frozenset(it[1] for it in items if it[0] == "slot")
        self.held = [weakref.ref(v) for v in out if type(v) is KeptRef]

    def free(self, host: ChildProcess) -> bool:
        """Whether the last outputs are all dropped here (so the child will likely repeat the run)."""
        if any(r() is not None for r in self.held) or any(slot not in host.maps for slot in self.slots):
            return False  # a result still held, or a slot the child deleted since (told with a later reply)
        return not any(slot in self.slots and ref() is not None for ref, slot in host.lent)

    def outputs(self, host: ChildProcess, first: int) -> _Made:
        """The outputs of the run repeated: its slots lent again, its kept values ``first``, ``first - 1``, ..."""
        assert self.items is not None
        lent: dict[int, np.ndarray] = {}
        held: dict[int, KeptRef] = {}
        out: list = []
        before = len(host.lent)
        for kind, at, dtype, shape in self.items:
            if kind == "slot":
                arr = lent.get(at)
                if arr is None:
                    arr = lent[at] = host.lend(at, dtype, shape)
                out.append(arr)
            else:
                ref = held.get(at)
                if ref is None:
                    ref = held[at] = KeptRef(host, first - at, dtype, shape)
                out.append(ref)
        self.held = [weakref.ref(v) for v in held.values()]
        return _Made(out, host, host.lent[before:])


_generations = itertools.count(1)
dropped: list[int] = []  # session ids whose proxies are gone (list.append/pop are atomic)


def _part(whole: np.ndarray, item: tuple) -> np.ndarray:
    """A slot's array, or where the item says (a generation's rows: ``(rows, keys)`` written of its
    ``[..., rows, keys]``, worker_steps) the part written: a view, which keeps the slot lent as the whole does."""
    if len(item) < 5:
        return whole
    rows, keys = item[4]
    return whole[..., :rows, :keys]


def _note_finite(stages: list, values: list[list], finite: list[dict[str, bool]]) -> None:
    """The child's NaN/Inf verdict per stage and map output, noted beside the arrays lent from its reply."""
    for (_, names, _), got, checked in zip(stages, values, finite):
        for k, ok in checked.items():
            note(got[names.index(k)], ok)
