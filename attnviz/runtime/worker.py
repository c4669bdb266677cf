"""The crash-isolation child: onnxruntime sessions run on the parent's requests (started by :mod:`attnviz.runtime.host`).

``python .../attnviz/runtime/worker.py FD OUTDIR WATCH PARENT MAIN``: started as a script, by path, so that the child imports only
numpy, onnxruntime and the three small attnviz modules it needs, not ``attnviz.runtime``'s package init (onnx,
the graph code, folders: ~12 MB of memory and ~0.5 s per child).  The server's classes still pickle under their
real module names.

Outputs over :data:`INLINE_BYTES` come back in *slots*: files in a memory-backed folder that the child and the
parent both keep mapped across runs, so that a run's maps cost neither a copy through the pipe nor fresh page
faults.  Ownership is one rule each way:

- a slot the child names in a reply is *lent* to the parent; the child never writes into a lent slot;
- the parent hands a slot back (inside its next run request) only once no array viewing it is left
  (``host._Host.lend``: a weak reference to the object every view of the slot keeps alive).

A free slot is reused: when an output's shape is known before the run, onnxruntime writes straight into a free
slot through I/O binding (no copy at all); otherwise onnxruntime allocates it and the child copies it into a slot
once.  Shapes are learned per session from earlier runs (:class:`ShapeLinks`).  Free slots unused for two runs are
deleted and the parent is told to unmap them.  A session whose outputs all went into slots keeps its I/O binding,
and each output asks for the slot it had last time, so a repeated run rebinds only its feeds.
"""

from __future__ import annotations

import itertools
import math
import mmap
import os
import pickle
import sys
import time
from collections.abc import Callable

import numpy as np


def _light_package() -> None:
    """Register ``attnviz.runtime`` as a bare package, so that importing isolation/session/errors does not run
    its ``__init__`` (which imports onnx and the whole engine)."""
    import types

    import attnviz

    here = os.path.dirname(os.path.abspath(__file__))
    pkg = types.ModuleType("attnviz.runtime")
    pkg.__path__ = [here]
    sys.modules["attnviz.runtime"] = pkg
    attnviz.runtime = pkg  # type: ignore[attr-defined]  # set by hand, as import would: mypy sees no such module attribute


if __name__ == "__main__":  # pragma: no cover - the child, before anything imports attnviz.runtime
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]  # this script's folder (engine modules named graph, model, errors...) must not shadow others
    _light_package()

from attnviz import AttnvizError  # noqa: E402
from attnviz.core import limits  # noqa: E402
from attnviz.runtime.chain import first_token, reads, resolve  # noqa: E402
from attnviz.runtime.finite import all_finite  # noqa: E402
from attnviz.runtime.isolation import (  # noqa: E402  (after the child's bare package)
    INLINE_BYTES,
    NodeArg,
    SharedFeed,
    SlotFeed,
    Taken,
    loop_run,
    read_message,
    write_message,
)
from attnviz.runtime.pinning import Pinner  # noqa: E402
from attnviz.runtime.steps import Loop, advance, step_run  # noqa: E402

# a free slot unused for this many runs is deleted.  A result held while the next run fills new slots frees its
# slots one run later, and a generation is three requests (the encoder, the decoder on the prompt, the loop's
# steps): with 2, a Whisper call's decoder and loop slots were deleted at the next call's encoder run and made anew
# (12 slots, ~3 MB of fresh pages mapped in both processes, every call); 4 keeps them across the next call
KEEP_RUNS = 4
KEEP_FREE_BYTES = 512 << 20  # never keep more than this in free slots (a one-off long input must not pin its maps)
MAX_MISSES = 3  # a session whose learned shapes were wrong this often stops predicting (data-dependent shapes)


def _slot_size(n: int) -> int:
    """Sizes round up to 1/8 of their power of two (>= 64 kB), so that inputs of nearby lengths reuse slots."""
    step = max(1 << 16, 1 << max(0, n.bit_length() - 4))
    return -(-n // step) * step


class Slot:
    __slots__ = ("id", "name", "cap", "mm", "view", "used")

    def __init__(self, sid: int, name: str, cap: int, mm: mmap.mmap, used: int):
        self.id, self.name, self.cap, self.mm, self.used = sid, name, cap, mm, used
        self.view = np.frombuffer(mm, np.uint8)  # its address is what onnxruntime writes to

    def array(self, dtype: np.dtype, shape: tuple) -> np.ndarray:
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return self.view[:n].view(dtype).reshape(shape)


class Pool:
    """The child's slots: lent to the parent, or free for the next run."""

    def __init__(self, outdir: str):
        self.outdir = outdir
        self.slots: dict[int, Slot] = {}
        self.free: set[int] = set()
        self.ids = itertools.count(1)
        self.run = 0
        self.created: list[tuple[int, str, int]] = []
        self.deleted: list[int] = []
        self.enabled = os.name == "posix"
        # on CUDA every slot is page-locked once, when made (runtime/pinning.py): the device-to-host copies of the
        # outputs bound into it then run at DMA speed; started by the child's first CUDA session, never on CPU
        self.pinner = Pinner()

    def pin_all(self) -> None:
        """Start page-locking (a CUDA session exists now): the slots made so far, and every later one."""
        self.pinner.start()
        for s in self.slots.values():
            self.pinner.pin(s.view.ctypes.data, s.cap)

    def close(self) -> None:
        """Unregister every page-locked slot (the child is leaving; its slots' folder goes next)."""
        self.pinner.close()

    def release(self, ids) -> None:
        for i in ids:
            if i in self.slots:
                self.free.add(i)

    def take(self, nbytes: int, prefer: int | None = None) -> Slot | None:
        """A slot of at least ``nbytes``, lent from now on; None when shared memory is full (the output then
        travels through the socket).  ``prefer``: the slot this output had last run, taken when it is free and
        fits (its I/O binding then stays as it is)."""
        if not self.enabled:
            return None
        size = _slot_size(nbytes)
        if prefer in self.free and nbytes <= self.slots[prefer].cap <= 2 * size:
            fits = [self.slots[prefer]]
        else:
            fits = [self.slots[i] for i in self.free if nbytes <= self.slots[i].cap <= 2 * size]
        slot = min(fits, key=lambda s: s.cap) if fits else self._new(size)
        if slot is not None:
            self.free.discard(slot.id)
            slot.used = self.run
        return slot

    def give_back(self, slot: Slot) -> None:
        """A slot taken for a run that failed: it was never lent."""
        self.free.add(slot.id)

    def _new(self, size: int) -> Slot | None:
        sid = next(self.ids)
        name = f"slot-{sid}"
        path = os.path.join(self.outdir, name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            try:
                if hasattr(os, "posix_fallocate"):
                    # reserve the pages now: a full tmpfs raises here instead of SIGBUS-ing onnxruntime mid-run
                    os.posix_fallocate(fd, 0, size)
                else:  # macOS: no fallocate (and no /dev/shm: the folder is on disk)
                    os.ftruncate(fd, size)
            except OSError:
                os.unlink(path)
                return None
            mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
        finally:
            os.close(fd)
        slot = Slot(sid, name, size, mm, self.run)
        self.slots[sid] = slot
        if self.pinner.active:  # once per slot: a slot is reused run after run until trimmed
            self.pinner.pin(slot.view.ctypes.data, size)
        self.created.append((sid, name, size))
        return slot

    def trim(self) -> None:
        """Delete free slots that went unused for KEEP_RUNS runs, and the oldest beyond KEEP_FREE_BYTES."""
        free = sorted((self.slots[i] for i in self.free), key=lambda s: s.used, reverse=True)
        kept = 0
        for s in free:
            if self.run - s.used >= KEEP_RUNS or kept + s.cap > KEEP_FREE_BYTES:
                self._delete(s)
            else:
                kept += s.cap

    def _delete(self, s: Slot) -> None:
        self.free.discard(s.id)
        del self.slots[s.id]
        self.pinner.unpin(s.view.ctypes.data)  # before the pages go: a registration must not outlive its mapping
        del s.view  # numpy's export of the mapping must go before it can be closed
        s.mm.close()
        try:
            os.unlink(os.path.join(self.outdir, s.name))
        except OSError:
            pass
        self.deleted.append(s.id)

    def changes(self) -> tuple[list, list]:
        c, d = self.created, self.deleted
        self.created, self.deleted = [], []
        return c, d


class ShapeLinks:
    """What each output dimension equals, learned from a session's earlier runs: a constant, or a dimension of
    one of the feeds.  Each run narrows the candidates; a dimension is predicted when its remaining candidates
    agree on one value (a feed's dimension wins over a constant that happened to be equal: attention maps follow
    the sequence length).  A wrong prediction costs a second run, never a wrong value: onnxruntime refuses an
    output buffer whose shape differs from the one it computes."""

    def __init__(self):
        self.outputs: dict[str, tuple[str, list[set]]] = {}
        self.misses = 0
        # the last feed dimensions seen and the shapes they gave: a run on the same dimensions (the usual case:
        # the same text again, or a GUI redraw) predicts and learns nothing new, so it skips both (~0.2 ms a run)
        self.memo: tuple[tuple, dict[str, tuple[np.dtype, tuple]]] = ((), {})

    @staticmethod
    def dims(feeds: dict) -> dict:
        return {(k, ax): int(n) for k, v in feeds.items() for ax, n in enumerate(v.shape)}  # arrays by now

    def predict_all(self, dims: dict, names: list[str]) -> dict[str, tuple[np.dtype, tuple] | None]:
        key, shapes = self.memo
        if key == tuple(dims.items()) and all(n in shapes for n in names) and self.misses < MAX_MISSES:
            return {n: shapes[n] for n in names}
        return {n: self.predict(dims, n) for n in names}

    def learn_all(self, dims: dict, got: dict) -> None:
        """Learn from a run's outputs (``got``: name -> object with ``dtype`` and ``shape``)."""
        key, shapes = self.memo
        key_now = tuple(dims.items())
        if key != key_now:
            shapes = {}
        for n, arr in got.items():
            if shapes.get(n) != (arr.dtype, tuple(arr.shape)):
                self.learn(dims, n, arr)
                shapes[n] = (np.dtype(arr.dtype), tuple(arr.shape))
        self.memo = (key_now, shapes)

    def learn(self, dims: dict, name: str, arr: np.ndarray) -> None:
        cands = [{("c", n)} | {("in", key) for key, m in dims.items() if m == n} for n in arr.shape]
        old = self.outputs.get(name)
        if old is not None and old[0] == arr.dtype.str and len(old[1]) == len(cands):
            cands = [a & b for a, b in zip(old[1], cands)]
        self.outputs[name] = (arr.dtype.str, cands)

    def predict(self, dims: dict, name: str) -> tuple[np.dtype, tuple] | None:
        known = self.outputs.get(name)
        if known is None or self.misses >= MAX_MISSES:
            return None
        shape = []
        for cands in known[1]:
            linked = {dims.get(c[1]) for c in cands if c[0] == "in"}
            values = linked if linked and None not in linked else {c[1] for c in cands if c[0] == "c"}
            if len(values) != 1:
                return None
            shape.append(values.pop())
        return np.dtype(known[0]), tuple(shape)


class Server:
    OPS = {
        "create": "create",
        "run": "reply_run",
        "chain": "chain",
        "steps": "steps",
        "chain_steps": "chain_steps",
        "close": "close",
        "trace": "take_trace",
        "pinned": "pinned",
    }

    def __init__(self, conn, outdir: str):
        self.conn = conn
        self.pool = Pool(outdir)
        self.sessions: dict[int, tuple] = {}
        self.keep: dict[int, tuple] = {}
        self.finite: dict[int, frozenset[str]] = {}  # per session: the map outputs checked (attnviz.runtime.finite)
        self.bindings: dict[int, _Binding] = {}  # per session: the I/O binding of its last all-slots run
        self.feed_area: tuple[str, mmap.mmap] | None = None  # the parent's feed file, mapped (see host._FeedArea)
        self.arena = _shared_arena()
        # ATTNVIZ_TRACE=1: per run request, (received, onnxruntime started, onnxruntime done, handled) on the
        # system-wide monotonic clock the parent's stamps use (bench/engine_breakdown_bench.py); off: no cost
        self.trace: list[tuple[float, ...]] | None = [] if os.environ.get("ATTNVIZ_TRACE") == "1" else None
        self._ort_span = (0.0, 0.0)
        self._unsettled: list[tuple] = []  # the last request's runs, until settle() learns from them
        self.send: Callable[[bytes], None] | None = None  # set by serve(): replies sent from inside a run
        self.replied = False  # this request's reply went out early (see _run)
        self.repeats: dict[int, _Repeat] = {}  # per session: its last run, to repeat without planning
        self.received = 0.0  # when this request arrived (for the trace)
        self.loops: dict[int, Loop] = {}  # per session: a generation running here (see attnviz.runtime.steps)

    def create(self, sid, model, kwargs):
        from attnviz.runtime.session import make_session

        if kwargs.get("initializers"):  # weights handed over as arrays: OrtValues that share their memory
            import onnxruntime as ort

            names, arrays = kwargs["initializers"]
            kwargs = dict(kwargs, initializers=(names, [ort.OrtValue.ortvalue_from_numpy(a) for a in arrays]))
            self.keep[sid] = (arrays, kwargs["initializers"])  # must outlive the session
        kwargs = dict(
            kwargs,
            shared_arena=bool(
                self.arena is not None and kwargs.get("arena", True) and kwargs.get("shared_arena", True)
            ),
        )
        self.finite[sid] = frozenset(kwargs.pop("finite", ()))  # map outputs checked for NaN/Inf after a run
        sess, note = make_session(model, **kwargs)
        self.sessions[sid] = (sess, ShapeLinks())
        if "CUDAExecutionProvider" in sess.get_providers()[:1]:  # its provider loaded the CUDA runtime
            self.pool.pin_all()
        desc = [
            [NodeArg(a.name, a.type, tuple(a.shape)) for a in getattr(sess, f"get_{k}")()]
            for k in ("inputs", "outputs")
        ]
        return note, sess.get_providers(), desc[0], desc[1]

    def run(self, sid, names, feeds, released):
        """One run; reply = (items, slots created, slots deleted), items in ``names`` order."""
        reply = self.reply_run(sid, names, feeds, released)
        self.settle()
        return reply

    def reply_run(self, sid, names, feeds, released):
        """A run up to its reply; :meth:`settle` does the rest.  ``serve`` sends the reply in between, so that
        learning shapes and trimming slots happen while the parent reads the maps, not before it can."""
        self.pool.release(released)
        self.pool.run += 1
        sess, links = self.sessions[sid]
        again = self.repeats.get(sid)
        if again is not None:
            if self._repeat(sid, sess, again, names, feeds):
                return again.items
            self.repeats.pop(sid, None)  # the planned run below may rebind what it holds
        uniq = names if len(set(names)) == len(names) else list(dict.fromkeys(names))
        sigs = {k: v for k, v in feeds.items() if isinstance(v, SharedFeed)}
        feeds = {k: self._feed(v) if k in sigs else np.ascontiguousarray(v) for k, v in feeds.items()}
        dims = links.dims(feeds)
        try:
            got = self._run(sid, sess, uniq, feeds, links.predict_all(dims, uniq), sigs, names)
        except _Misprediction:
            links.misses += 1
            got = self._run(sid, sess, uniq, feeds, {}, sigs, names)
        self._unsettled.append((links, dims, got))
        return [got[n][0] for n in names], *self.pool.changes()

    def chain(self, stages, released):
        """Several sessions' runs as one request (:mod:`attnviz.runtime.chain`): each stage ``(session id, fetch,
        feeds)`` in turn, a :class:`~attnviz.runtime.isolation.Spliced` or :class:`~attnviz.runtime.isolation.Taken`
        feed made here from earlier stages' outputs (which stay in their slots, lent with the reply).  One request
        ages the free slots once, so a repeated chain finds every stage's slots again.  Reply: (items per stage,
        per stage the checked map outputs' NaN/Inf verdicts, slots created, slots deleted)."""
        self.pool.release(released)
        self.pool.run += 1
        t0 = time.perf_counter()
        _, items = self._chain(stages, reads(f for _, _, f in stages))
        finite = self._finite_stages(stages, items)
        self._ort_span = (t0, time.perf_counter())
        return items, finite, *self.pool.changes()

    def _finite_stages(self, stages, items: list[list]) -> list[dict[str, bool]]:
        """Per stage, its checked map outputs' NaN/Inf verdicts (:mod:`attnviz.runtime.finite`), made here where
        onnxruntime just wrote them rather than by the parent reading them cold."""
        out = []
        for (sid, names, _), got in zip(stages, items):
            checked = self.finite.get(sid, frozenset())
            out.append({n: all_finite(self._array(it)) for n, it in zip(names, got) if n in checked})
        return out

    def _chain(self, stages, read: set[tuple[int, str]]) -> tuple[list[dict[str, np.ndarray]], list[list]]:
        """The stages run: (per stage the outputs in ``read`` as arrays, per stage its items in fetch order).
        ``read``: the (stage, output) pairs something after reads (views made of those alone: a decoder's 18
        outputs are not all read)."""
        outs: list[dict[str, np.ndarray]] = []
        items: list[list] = []
        try:
            for stage, (sid, names, feeds) in enumerate(stages):
                sess, links = self.sessions[sid]
                self.repeats.pop(sid, None)  # the run below may rebind the binding a repeat holds
                uniq = names if len(set(names)) == len(names) else list(dict.fromkeys(names))
                sigs = {k: v for k, v in feeds.items() if isinstance(v, SharedFeed)}
                arrays = resolve({k: self._feed(v) if k in sigs else v for k, v in feeds.items()}, outs)
                arrays = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
                dims = links.dims(arrays)
                try:
                    got = self._run(sid, sess, uniq, arrays, links.predict_all(dims, uniq), sigs, names, early=False)
                except _Misprediction:
                    links.misses += 1
                    got = self._run(sid, sess, uniq, arrays, {}, sigs, names, early=False)
                self._unsettled.append((links, dims, got))
                outs.append({n: self._array(got[n][0]) for n in uniq if (stage, n) in read})
                items.append([got[n][0] for n in names])
        except BaseException:
            self._release_items(items)  # the earlier stages' slots were never lent (no reply names them): free again
            raise
        return outs, items

    def _release_items(self, items: list[list]) -> None:
        self.pool.release(it[1] for stage in items for it in stage if it[0] == "slot")

    def _array(self, item) -> np.ndarray:
        """The array an output item holds: a view of its slot, or the inline array."""
        if item[0] == "slot":
            return self.pool.slots[item[1]].array(np.dtype(item[2]), item[3])
        return item[1]

    def _repeat(self, sid: int, sess, again: _Repeat, names, feeds) -> bool:
        """This session's last run, again: the same outputs, the feeds at the same places in the feed area with
        the same dtypes and shapes, and its slots all handed back.  Then the kept binding runs as it is and the
        same reply goes out, with no planning, binding or pickling (a script or benchmark looping over inputs of
        one length; the window keeps its last result while the next runs, so its runs are planned).  False, with
        nothing done, when anything differs."""
        pool = self.pool
        if (
            self.send is None
            or names != again.names
            or pool.created
            or pool.deleted
            or any(type(v) is not SharedFeed for v in feeds.values())
            or tuple(feeds.items()) != again.feeds
            or any(i not in pool.free for i in again.slots)
        ):
            return False
        for i in again.slots:
            pool.free.discard(i)
            pool.slots[i].used = pool.run
        try:
            t0 = time.perf_counter()
            sess.run_with_iobinding(again.io)
            self._ort_span = (t0, time.perf_counter())
        except Exception:
            pool.free.update(again.slots)
            del self.repeats[sid]
            return False  # the planned path runs it again and reports what went wrong
        if self.trace is not None:
            self.trace.append((self.received, *self._ort_span, time.perf_counter()))
        self.replied = True
        self.send(again.reply)
        return True

    def steps(self, sid, start, token, n, eos, budget, released):
        """A chunk of greedy cached steps run here (:func:`attnviz.runtime.steps.advance`), the cache kept in
        this process between chunks.  ``start``: (plan, feeds, cache length) for a new generation, None to go
        on.  Reply: (ids, finished, map output names, their items, the checked ones' NaN/Inf verdicts, slots
        created, slots deleted)."""
        self.pool.release(released)
        self.pool.run += 1
        borrowed: dict[str, np.ndarray] = {}
        if start is not None:
            plan, feeds, length, embed_sid = start
            self.loops.pop(sid, None)  # a generation left unfinished (cancelled): its cache goes before the next's
            self.loops[sid] = self._loop(plan, feeds, length, embed_sid, [], borrowed)
        ids, finished, names, items, finite = self._chunk(sid, token, n, eos, budget, borrowed)
        return ids, finished, names, items, finite, *self.pool.changes()

    def chain_steps(self, stages, sid, start, n, eos, budget, released):
        """A chain (:meth:`chain`) and a new generation's first chunk (:meth:`steps`) after it, as one request: a
        speech model's encoder, its decoder on the prompt, the first token chosen from the prompt's logits, then
        the with-past decoder's steps fed the decoder's presents (:class:`~attnviz.runtime.isolation.Taken`), so
        the hidden states and the cache never leave this process and three round trips are one.  ``start``:
        (plan, feeds, cache length, :data:`~attnviz.runtime.chain.First`, held, the session id of the model each
        token goes through first or None: a VLM's embeddings); ``n`` counts the first token;
        ``held``: the (stage, output) pairs the caller does not want back (the prompt's presents, which only the
        loop reads): their items come back empty and their slots are free again once the chunk has run (a loop
        going on past it has copied what it still reads, see :meth:`_chunk`).
        Reply: (ids, finished, map output names, their items, their verdicts, items per stage, per stage the
        verdicts, slots created, slots deleted) (verdicts: :meth:`_finite_stages`)."""
        self.pool.release(released)
        self.pool.run += 1
        plan, feeds, length, first, held, embed_sid = start
        self.loops.pop(sid, None)  # a generation left unfinished (cancelled): its cache goes before the next's
        t0 = time.perf_counter()
        outs, stage_items = self._chain(stages, reads([*(f for _, _, f in stages), feeds]) | {(first[0], first[1])})
        try:
            stage_finite = self._finite_stages(stages, stage_items)  # the prompt's maps, before the loop runs
            token = first_token(first, outs)
            ids, finished = [token], eos is not None and token == int(eos)
            names: list[str] = []
            items: list = []
            finite: dict[str, bool] = {}
            if not finished and n > 1:
                borrowed: dict[str, np.ndarray] = {}
                self.loops[sid] = self._loop(plan, feeds, length, embed_sid, outs, borrowed)
                more, finished, names, items, finite = self._chunk(sid, token, n - 1, eos, budget, borrowed)
                ids += more
        except BaseException:
            self.loops.pop(sid, None)
            self._release_items(stage_items)
            raise
        for stage, name in held:
            k = stages[stage][1].index(name)
            kept = stage_items[stage][k]
            if kept[0] == "slot":
                self.pool.release([kept[1]])
            stage_items[stage][k] = ("inline", None)
        self._ort_span = (t0, time.perf_counter())
        return ids, finished, names, items, finite, stage_items, stage_finite, *self.pool.changes()

    def _loop(self, plan, feeds: dict, length: int, embed_sid, outs: list, borrowed: dict) -> Loop:
        """A new generation's loop on ``feeds``: those from the feed area (rewritten by the parent's next request),
        slots lent to the parent (handed back by a later request) and a chain's outputs (lent with this reply)
        are read in place during the first chunk (a Whisper cache is 2 MB) and noted in ``borrowed``, to be
        copied by :meth:`_chunk` only when the loop goes on past it."""
        own = {}
        for k, v in feeds.items():
            if isinstance(v, SharedFeed):
                own[k] = borrowed[k] = self._feed(v)
            elif isinstance(v, SlotFeed):  # this process's output, lent to the parent for this request
                own[k] = borrowed[k] = self.pool.slots[v.slot].array(np.dtype(v.dtype), v.shape)
            elif isinstance(v, Taken):  # a chain's output in this request
                own[k] = borrowed[k] = resolve({k: v}, outs)[k]
            else:
                own[k] = np.asarray(v)  # unpickled from the request: this process's own
        embed = None
        if embed_sid is not None:  # a VLM's embed_tokens session, created in this process beside the decoder
            if embed_sid not in self.sessions:
                raise AttnvizError(
                    "generation lost its embedding model (the model's process restarted); generate again"
                )
            embed = loop_run(self.sessions[embed_sid][0])
        return Loop(plan, own, int(length), embed)

    def _chunk(self, sid, token, n, eos, budget, borrowed: dict) -> tuple[list[int], bool, list[str], list, dict]:
        """A chunk of the loop of session ``sid``: (ids, finished, map output names, their items, the checked
        ones' NaN/Inf verdicts)."""
        loop = self.loops.get(sid)
        if loop is None:
            raise AttnvizError("generation lost its cache (the model's process restarted); generate again")
        try:
            chunk = advance(loop, token, n, eos, step_run(self.sessions[sid][0], loop.plan), budget)
        except BaseException:
            self.loops.pop(sid, None)
            raise
        if chunk.finished or len(chunk.ids) >= n:
            self.loops.pop(sid, None)  # the caller asks for exactly the steps it still needs
        else:
            for k, v in borrowed.items():
                if loop.feeds.get(k) is v:  # still the parent's bytes (the encoder's half of a cache stays)
                    loop.feeds[k] = np.array(v)
        names = list(chunk.maps)
        checked = self.finite.get(sid, frozenset())
        finite = {k: all_finite(chunk.maps[k]) for k in names if k in checked}
        return chunk.ids, chunk.finished, names, [self._pack(chunk.maps[k]) for k in names], finite

    def settle(self) -> None:
        """After a run's reply: learn its output shapes and trim free slots (the slots trimmed here are
        reported with the next reply; the parent keeps a slot mapped until it is told)."""
        runs, self._unsettled = self._unsettled, []
        for links, dims, got in runs:
            links.learn_all(dims, {n: shaped for n, (_, shaped) in got.items()})
        self.pool.trim()

    def _run(self, sid, sess, names, feeds, predicted, sigs, order, early=True):
        """Run with every output bound: into a free slot where its shape is predicted, else where onnxruntime
        puts it (then copied into a slot, and onnxruntime's copy given back at once).  ``sigs``: the feeds that
        came through the feed area, by where they lie there; a kept binding whose input lies at the same place
        with the same dtype and shape still points at it (the parent rewrote the bytes), so it is not rebound.

        When every output goes into a predicted slot the reply is known before the run: with ``self.send`` set
        (the child's loop) it is pickled first and sent the moment onnxruntime returns (``order``: the names
        as the request listed them), so nothing stands between the run's end and the parent's wake-up (not for
        ``early=False``: a chain's stage, whose reply is the whole chain's)."""
        kept = self.bindings.pop(sid, None)
        last = kept.outs if kept is not None else {}
        plan: dict[str, tuple[Slot, np.dtype, tuple]] = {}
        for n in names:
            p = predicted.get(n)
            nbytes = math.prod(p[1]) * p[0].itemsize if p is not None else 0
            slot = self.pool.take(nbytes, (last.get(n) or (None,))[0]) if nbytes > INLINE_BYTES else None
            if p is not None and slot is not None:
                plan[n] = (slot, p[0], p[1])
        if len(plan) == len(names) and kept is not None and kept.names == names:
            io = kept.io  # every output into a slot again: rebind only the outputs whose slot or shape changed
            outs_of = kept.outs
        else:
            io, outs_of = sess.io_binding(), {}
        ins_of = kept.ins if kept is not None and io is kept.io else {}
        for k, v in feeds.items():
            sig = sigs.get(k)
            if sig is None or ins_of.get(k) != sig:  # an inline feed is a new array: rebound every run
                io.bind_cpu_input(k, v)
                ins_of[k] = sig
        for n in names:
            sig = (plan[n][0].id, plan[n][1], plan[n][2]) if n in plan else None
            if sig is not None and outs_of.get(n) == sig:
                continue
            if sig is not None:
                slot, dtype, shape = plan[n]
                io.bind_output(n, "cpu", 0, dtype.type, list(shape), slot.view.ctypes.data)
            else:
                io.bind_output(n, "cpu")
            outs_of[n] = sig
        bound = {n: p[0] for n, p in plan.items()}
        reply_now = early
        early = None
        if reply_now and self.send is not None and len(bound) == len(names):
            items = {n: ("slot", bound[n].id, predicted[n][0].str, predicted[n][1]) for n in names}
            pool = self.pool
            reply = ([items[n] for n in order], list(pool.created), list(pool.deleted))
            early = pickle.dumps(("ok", reply), pickle.HIGHEST_PROTOCOL)
        try:
            t0 = time.perf_counter()
            sess.run_with_iobinding(io)
            self._ort_span = (t0, time.perf_counter())
        except Exception:
            for slot in bound.values():
                self.pool.give_back(slot)
            if bound:  # most likely a learned shape was wrong; the retry says what else it was
                raise _Misprediction() from None
            raise
        if early is not None and self.send is not None:
            if self.trace is not None:
                self.trace.append((self.received, *self._ort_span, time.perf_counter()))
            self.replied = True  # set first: a reply that fails to go out must not be followed by another
            self.send(early)
            created, deleted = self.pool.changes()  # the slots it reported
            self.repeats.pop(sid, None)
            if feeds and len(sigs) == len(feeds):
                again = (
                    pickle.dumps(("ok", (reply[0], [], [])), pickle.HIGHEST_PROTOCOL) if created or deleted else early
                )
                slots = [bound[n].id for n in names]
                self.repeats[sid] = _Repeat(list(order), tuple(sigs.items()), slots, io, again, reply[0])
        if len(bound) == len(names):
            # onnxruntime wrote every output into its slot: nothing to fetch, and the binding is reused next run
            # (creating and binding it anew costs ~0.15 ms of a 128-token MiniLM run, measured)
            self.bindings[sid] = _Binding(io, names, outs_of, ins_of)
            return {
                n: (("slot", bound[n].id, predicted[n][0].str, predicted[n][1]), _Shaped(*predicted[n])) for n in names
            }
        outs = io.get_outputs()
        io.clear_binding_outputs()  # from here ``outs`` holds onnxruntime's buffers alone: each can go on its own
        del io
        copies = sum(_nbytes(o) for n, o in zip(names, outs) if o is not None and n not in bound)
        big = any(o is not None and n not in bound and _nbytes(o) > INLINE_BYTES for n, o in zip(names, outs))
        shrink = big and _worth_shrinking(copies)
        if shrink:
            self._give_back_arena()  # the run's intermediates first: the copies below then add ~one map at most
        got = {}
        for i, n in enumerate(names):
            ov, outs[i] = outs[i], None
            if n in bound:
                dtype, shape = predicted[n]
                got[n] = (("slot", bound[n].id, dtype.str, shape), _Shaped(dtype, shape))
                continue
            arr = ov.numpy()
            del ov
            item = self._pack(arr)
            got[n] = (item, _Shaped(arr.dtype, arr.shape))
            del arr
            if item[0] == "slot" and shrink:
                self._give_back_arena()
        return got

    def handle(self, op: str, args: tuple) -> None:
        """One request from the parent: exactly one reply goes out through ``self.send`` (a run whose outputs
        were all predicted sends its own from inside, see :meth:`_run`), then the run is settled.  Replies are
        plain pickles, not Connection.send's ForkingPickler: nothing sent is a socket or a file handle."""
        assert self.send is not None
        self.received, self.replied = time.perf_counter(), False
        try:
            if op not in self.OPS:
                raise ValueError(f"unknown op {op!r}")
            reply = getattr(self, self.OPS[op])(*args)
            if self.trace is not None and op in ("run", "chain", "chain_steps") and not self.replied:
                self.trace.append((self.received, *self._ort_span, time.perf_counter()))
            data = pickle.dumps(("ok", reply), pickle.HIGHEST_PROTOCOL)
        except BaseException as e:
            err = str(e) if isinstance(e, AttnvizError) else f"{type(e).__name__}: {e}"
            data = pickle.dumps(("attnviz" if isinstance(e, AttnvizError) else "error", err), pickle.HIGHEST_PROTOCOL)
        if not self.replied:
            self.send(data)
        self.settle()

    def take_trace(self) -> list[tuple[float, ...]]:
        """The run stamps recorded since the last call (empty when tracing is off)."""
        out, self.trace = self.trace or [], [] if self.trace is not None else None
        return out

    def pinned(self) -> str:
        """Whether the slots are page-locked: ``"yes"``, or ``"no (why)"`` (runtime/pinning.py)."""
        return self.pool.pinner.state

    def _feed(self, ref: SharedFeed) -> np.ndarray:
        """A view of a feed in the parent's feed area, valid for this run (the parent rewrites it for the next)."""
        if self.feed_area is None or self.feed_area[0] != ref.file:
            if self.feed_area is not None:
                _close_map(self.feed_area[1])
            fd = os.open(os.path.join(self.pool.outdir, ref.file), os.O_RDWR)
            try:
                self.feed_area = (ref.file, mmap.mmap(fd, 0, flags=mmap.MAP_SHARED))
            finally:
                os.close(fd)
        dt = np.dtype(ref.dtype)
        return np.frombuffer(self.feed_area[1], dt, math.prod(ref.shape), ref.offset).reshape(ref.shape)

    def _give_back_arena(self) -> None:
        """Return onnxruntime's free arena memory to the system now.  Called after each output copied into a
        slot, so that a run whose shapes were not known yet holds its maps about once, not twice (the arena
        would keep its copy for the life of the session: +72 MB at 512 tokens on MiniLM, measured)."""
        if self.arena is None:
            return
        tiny, opts = self.arena
        tiny.run(None, {"x": np.zeros(1, np.float32)}, opts)

    def _pack(self, v):
        v = np.asarray(v)
        if v.nbytes <= INLINE_BYTES or v.dtype.hasobject:
            return ("inline", v)
        slot = self.pool.take(v.nbytes)
        if slot is None:
            return ("inline", v)
        np.copyto(slot.array(v.dtype, v.shape), v)  # onnxruntime allocated it: one copy into shared memory
        return ("slot", slot.id, v.dtype.str, v.shape)

    def close(self, sids):
        for sid in sids:
            self.sessions.pop(sid, None)
            self.keep.pop(sid, None)
            self.finite.pop(sid, None)
            self.bindings.pop(sid, None)
            self.repeats.pop(sid, None)
            self.loops.pop(sid, None)


# a 65-byte ONNX model, y = Identity(x) on float[1] (built with onnx.helper; the child does not import onnx)
_IDENTITY_MODEL = (
    b'\x08\x08:7\n\x10\n\x01x\x12\x01y"\x08Identity\x12\x01gZ\x0f\n\x01x\x12\n\n\x08\x08\x01\x12\x04\n\x02\x08\x01'
    b"b\x0f\n\x01y\x12\n\n\x08\x08\x01\x12\x04\n\x02\x08\x01B\x04\n\x00\x10\x11"
)


# Giving the arena back costs the next run its pages again: at 4,096 tokens on MiniLM 470k page faults and 0.85 s
# of system time a run (20 % of the run), to save holding on-demand's 72 MB of Q/K twice.  So it is given back only
# when the outputs to copy are a large share of what the process holds (dense maps: 75 MB of a ~300 MB process at
# 512 tokens), not a sliver of it (on-demand's Q/K beside 2.5 GB of attention scores the next run needs again).
SHRINK_SHARE = 0.2


def _worth_shrinking(copies: int) -> bool:
    try:
        with open("/proc/self/statm", "rb") as fh:
            rss = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return True  # no way to tell here: keep the memory promise
    return copies >= SHRINK_SHARE * rss


def _shared_arena():
    """One CPU arena for every session of the child (``session.use_env_allocators``), growing by exactly what
    is asked (so a run's large outputs sit in regions of their own), and a tiny session whose run with
    ``memory.enable_memory_arena_shrinkage`` returns the arena's free regions to the system.  None where this
    onnxruntime cannot (the child then works as before, with the arena keeping what it allocated)."""
    try:
        import onnxruntime as ort

        info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
        # capped at the run memory cap too: a backstop for what the shape estimate cannot size (runtime/memory.py)
        cfg = {"arena_extend_strategy": 1, "max_mem": limits.memory_cap()[0]}  # kSameAsRequested
        ort.create_and_register_allocator(info, ort.OrtArenaCfg(cfg))
        so = ort.SessionOptions()
        so.add_session_config_entry("session.use_env_allocators", "1")
        so.intra_op_num_threads = 1
        tiny = ort.InferenceSession(_IDENTITY_MODEL, so, providers=["CPUExecutionProvider"])
        opts = ort.RunOptions()
        opts.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        return tiny, opts
    except Exception:
        return None


def _close_map(mm: mmap.mmap) -> None:
    try:
        mm.close()
    except BufferError:  # a view from a failed run may linger until collected: the mapping goes with it
        pass


def _nbytes(ov) -> int:
    """About the bytes of an OrtValue tensor (4-byte elements assumed: only compared with INLINE_BYTES)."""
    try:
        return int(np.prod(ov.shape(), dtype=np.int64)) * 4
    except Exception:
        return 0


class _Binding:
    """A session's I/O binding kept after a run whose outputs all went into slots: ``outs`` says what each
    output is bound to ((slot id, dtype, shape)), ``ins`` where each feed lies in the feed area (a
    :class:`SharedFeed`, None for an inline feed), so the next run rebinds only what changed.  The binding
    holds the feed views it was given, so a feed area the parent replaced stays mapped while it is bound."""

    __slots__ = ("io", "names", "outs", "ins")

    def __init__(self, io, names: list[str], outs: dict, ins: dict):
        self.io, self.names, self.outs, self.ins = io, names, outs, ins


class _Repeat:
    """What a session's last fully predicted run needs to run again unchanged (see ``Server._repeat``)."""

    __slots__ = ("names", "feeds", "slots", "io", "reply", "items")

    def __init__(self, names: list[str], feeds: tuple, slots: list[int], io, reply: bytes, items: list):
        self.names, self.feeds, self.slots, self.io, self.reply, self.items = names, feeds, slots, io, reply, items


class _Shaped:
    """The dtype and shape of an output onnxruntime wrote into a slot (all :meth:`ShapeLinks.learn` reads)."""

    def __init__(self, dtype, shape):
        self.dtype, self.shape = dtype, shape


class _Misprediction(Exception):
    pass


def serve(conn, outdir: str) -> None:  # pragma: no cover - runs in the child process
    server = Server(conn, outdir)
    fd = conn.fileno() if os.name == "posix" else None  # Windows: a pipe handle, used through the Connection
    server.send = conn.send_bytes if fd is None else (lambda data: write_message(fd, data))
    try:
        while True:
            try:
                op, args = conn.recv() if fd is None else pickle.loads(read_message(fd))
            except (EOFError, OSError):
                return
            server.handle(op, args)
    finally:
        server.pool.close()  # no page-locked slot outlives the loop (a killed child's go with its process)


def serve_orphanless(conn, outdir: str, parent: int) -> None:  # pragma: no cover - the Windows child
    import multiprocessing as mp
    import shutil

    from attnviz.runtime.lifetime import die_with_parent

    sentinel = mp.parent_process().sentinel  # type: ignore[union-attr]  # a spawned child always has a parent
    die_with_parent(parent, sentinel, signal_ok=False, on_orphan=lambda: shutil.rmtree(outdir, ignore_errors=True))
    serve(conn, outdir)


if __name__ == "__main__":  # pragma: no cover - the child process
    import shutil
    from multiprocessing.connection import Connection

    from attnviz.runtime.lifetime import die_with_parent

    # FD OUTDIR WATCH PARENT MAIN: end with the parent, even mid-run (a kill -9 of attnviz must not leave us)
    die_with_parent(
        int(sys.argv[4]),
        int(sys.argv[3]),
        signal_ok=sys.argv[5] == "1",
        on_orphan=lambda: shutil.rmtree(sys.argv[2], ignore_errors=True),
    )
    try:
        serve(Connection(int(sys.argv[1])), sys.argv[2])
    except (EOFError, OSError):  # a reply the parent was no longer there to read
        pass
    # the parent is gone (its end of the socket closed) without removing the slots' folder: it was killed by a
    # signal or left through os._exit (a parent that stops the child kills it first and removes the folder itself)
    shutil.rmtree(sys.argv[2], ignore_errors=True)
