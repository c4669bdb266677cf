"""The crash-isolation child: onnxruntime sessions run on the parent's requests (started by :mod:`attnviz.runtime.host`).

``python .../attnviz/runtime/worker.py FD OUTDIR WATCH PARENT MAIN``: started as a script, by path, so that the child imports only
numpy, onnxruntime and the small attnviz modules it needs (slots.py, arena.py, worker_steps.py, ...), not
``attnviz.runtime``'s package init (onnx, the graph code, folders: ~12 MB of memory and ~0.5 s per child).  The
server's classes still pickle under their real module names.

Outputs over :data:`INLINE_BYTES` come back in *slots*: files in a memory-backed folder that the child and the
parent both keep mapped across runs, so that a run's maps cost neither a copy through the pipe nor fresh page
faults.  Ownership is one rule each way:

- a slot the child names in a reply is *lent* to the parent; the child never writes into a lent slot;
- the parent hands a slot back (inside its next run request) only once no array viewing it is left
  (``child.ChildProcess.lend``: a weak reference to the object every view of the slot keeps alive).

A free slot is reused: when an output's shape is known before the run, onnxruntime writes straight into a free
slot through I/O binding (no copy at all); otherwise onnxruntime allocates it and the child copies it into a slot
once.  Shapes are learned per session from earlier runs (:class:`ShapeLinks`).  Free slots unused for two runs are
deleted and the parent is told to unmap them.  A session whose outputs all went into slots (or stay on its device,
below) keeps its I/O binding, and each output asks for the slot it had last time, so a repeated run rebinds only
its feeds.

An on-demand session's Q and Kᵀ may instead stay where onnxruntime wrote them (a CUDA session's GPU): kept here by
id until the parent drops its handle, and fed to a site's head model when a head is drawn (``worker_kept.py``).
The kept binding holds each such output's last value and writes the next run's into it once the parent dropped it
(``_Held``).
"""

from __future__ import annotations

import itertools
import math
import mmap
import os
import pickle
import signal
import sys
import time
from collections.abc import Callable

if __name__ == "__main__":  # pragma: no cover - the child, first thing (numpy's import alone takes a while)
    # a terminal's Ctrl-C goes to the whole process group: it is the parent's to handle (it stops, says
    # "interrupted" and kills this child at exit, host.shutdown), not a KeyboardInterrupt traceback of ours on stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)

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
    # set by hand, as import would; whether mypy already sees the attribute depends on what the imports import
    attnviz.runtime = pkg  # type: ignore[attr-defined, unused-ignore]


if __name__ == "__main__":  # pragma: no cover - the child, before anything imports attnviz.runtime
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]  # this script's folder (engine modules named graph, model, errors...) must not shadow others
    _light_package()

from attnviz import AttnvizError  # noqa: E402
from attnviz.runtime.arena import shared_arena, worth_shrinking  # noqa: E402
from attnviz.runtime.chain import reads, resolve  # noqa: E402
from attnviz.runtime.finite import all_finite  # noqa: E402
from attnviz.runtime.isolation import (  # noqa: E402  (after the child's bare package)
    INLINE_BYTES,
    NodeArg,
    SharedFeed,
    read_message,
    write_message,
)
from attnviz.runtime.kept import KEPT_TYPES  # noqa: E402
from attnviz.runtime.slots import (  # noqa: E402, F401  (re-exported: tests and host import them from here)
    KEEP_RUNS,
    Pool,
    ShapeLinks,
    Slot,
    _slot_size,
    close_map,
)
from attnviz.runtime.steps import Loop  # noqa: E402
from attnviz.runtime.worker_kept import KeptRequests, keepable, output_values, same_kept  # noqa: E402
from attnviz.runtime.worker_steps import StepRequests  # noqa: E402


class Server(StepRequests, KeptRequests):
    OPS = {
        "create": "create",
        "run": "reply_run",
        "again": "reply_again",
        "chain": "chain",
        "steps": "steps",
        "chain_steps": "chain_steps",
        "close": "close",
        "trace": "take_trace",
        "pinned": "pinned",
        "run_kept": "run_kept",
        "kept": "kept_count",
        "helper_memory": "helper_memory",
    }

    def __init__(self, conn, outdir: str):
        self.conn = conn
        self.pool = Pool(outdir)
        self.sessions: dict[int, tuple] = {}
        self.finite: dict[int, frozenset[str]] = {}  # per session: the map outputs checked (attnviz.runtime.finite)
        self.bindings: dict[int, _Binding] = {}  # per session: the binding of its last all-slots-or-kept run
        self.feed_area: tuple[str, mmap.mmap] | None = None  # the parent's feed file, mapped (see feedarea.FeedArea)
        self.arena = shared_arena()
        # ATTNVIZ_TRACE=1: per run request, (received, onnxruntime started, onnxruntime done, handled) on the
        # system-wide monotonic clock the parent's stamps use (bench/engine_breakdown_bench.py); off: no cost
        self.trace: list[tuple[float, ...]] | None = [] if os.environ.get("ATTNVIZ_TRACE") == "1" else None
        self._ort_span = (0.0, 0.0)
        self._unsettled: list[tuple] = []  # the last request's runs, until settle() learns from them
        self.send: Callable[[bytes], None] | None = None  # set by serve(): replies sent from inside a run
        self.replied = False  # this request's reply went out early (see _run)
        self.repeats: dict[int, _Repeat] = {}  # per session: its last run, to repeat without planning
        self.last_run: dict[int, tuple[list[str], dict]] = {}  # per session: its last run request's names and feeds
        self.received = 0.0  # when this request arrived (for the trace)
        self.loops: dict[int, Loop] = {}  # per session: a generation running here (see attnviz.runtime.steps)
        # per session: the outputs its runs leave on its device (names, device, device id: runtime/kept.py), and
        # the values so kept, by id, until the parent says it dropped them (``forget``, ahead of a request)
        self.keep_on: dict[int, tuple[frozenset[str], str, int]] = {}
        self.kept: dict[int, object] = {}
        self.kept_ids = itertools.count(1)

    def create(self, sid, model, kwargs):
        from attnviz.runtime.session import make_session

        kwargs = dict(
            kwargs,
            shared_arena=bool(
                self.arena is not None and kwargs.get("arena", True) and kwargs.get("shared_arena", True)
            ),
        )
        self.finite[sid] = frozenset(kwargs.pop("finite", ()))  # map outputs checked for NaN/Inf after a run
        keep = kwargs.pop("keep", None)  # on-demand Q/Kᵀ left on the device (runtime/kept.py)
        sess, note = make_session(model, **kwargs)
        self.sessions[sid] = (sess, ShapeLinks())
        self.keep_for(sid, sess, keep)
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

    def reply_run(self, sid, names, feeds, released, first=None):
        """A run up to its reply; :meth:`settle` does the rest.  ``serve`` sends the reply in between, so that
        learning shapes and trimming slots happen while the parent reads the maps, not before it can."""
        self.last_run[sid] = (names, feeds)
        self.pool.release(released)
        self.pool.run += 1
        sess, links = self.sessions[sid]
        again = self.repeats.get(sid)
        if again is not None:
            if self._repeat(sid, sess, again, names, feeds, first):
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

    def reply_again(self, sid, released, first):
        """The parent's "again" (``child.ChildProcess.run``): a run of ``sid`` with the output names and feeds of
        its last run request, which the parent sends only where they are the same (the feeds rewritten at the same
        places of the feed area).  A run that repeats (:meth:`_repeat`) keeps its values under the ids the parent
        gave (``first``, ``first - 1``, ...: negative, never one of ours) and replies ("again", None): the parent
        made its outputs from the last reply's items while this one ran.  Else as :meth:`reply_run`."""
        names, feeds = self.last_run[sid]
        return self.reply_run(sid, names, feeds, released, first)

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
        self.forget(it[1] for stage in items for it in stage if it[0] == "kept")  # no reply named them either

    def _array(self, item) -> np.ndarray:
        """The array an output item holds: a view of its slot, or the inline array."""
        if item[0] == "slot":
            return self.pool.slots[item[1]].array(np.dtype(item[2]), item[3])
        if item[0] == "kept":  # a later stage reads a value kept on the device (none does today): its host copy
            return self.kept[item[1]].numpy()  # type: ignore[attr-defined]  # an OrtValue
        return item[1]

    def _repeat(self, sid: int, sess, again: _Repeat, names, feeds, first: int | None) -> bool:
        """This session's last run, again: the same outputs, the feeds at the same places in the feed area with
        the same dtypes and shapes, its slots all handed back and the values it kept on the device all dropped
        by the parent.  Then the kept binding runs as it is (the kept values written again in place) and the
        reply, made before the run, goes out the moment onnxruntime returns, with no planning or binding (a
        script or benchmark looping over inputs of one length; the window keeps its last result while the next
        runs, so its runs are planned).  ``first``: the request was the parent's "again" (:meth:`reply_again`),
        which made the outputs itself, its kept values to be ``first``, ``first - 1``, ...: the reply is ("again",
        None).  False, with nothing done, when anything differs."""
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
        outs, kept = again.outs, self.kept
        for n in again.kept:
            mark = outs.get(n)
            if type(mark) is not _Held or mark.kid in kept:  # the parent may still read the value: not written over
                return False
        if first is not None:  # the ids the parent gave, and it made the outputs (see reply_again)
            kids = [first - j for j in range(len(again.kept))]
            reply = _AGAIN
        else:  # the last reply with the kept values' new ids, made now: it goes out the moment the run ends
            kids = [next(self.kept_ids) for _ in again.kept]
            reply = again.reply
            if kids:
                new = dict(zip(again.kept, kids))
                items = [(it[0], new[n], *it[2:]) if it[0] == "kept" else it for n, it in zip(again.names, again.items)]
                reply = pickle.dumps(("ok", (items, [], [])), pickle.HIGHEST_PROTOCOL)
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
        self.send(reply)
        for n, kid in zip(again.kept, kids):  # after the reply: kept for the parent under the ids it was given
            was = outs[n]
            kept[kid] = was.value
            outs[n] = _Held(kid, was.dtype, was.shape, was.value)
        return True

    def settle(self) -> None:
        """After a run's reply: learn its output shapes and trim free slots (the slots trimmed here are
        reported with the next reply; the parent keeps a slot mapped until it is told)."""
        runs, self._unsettled = self._unsettled, []
        for links, dims, got in runs:
            links.learn_all(dims, {n: shaped for n, (_, shaped) in got.items()})
        self.pool.trim()

    def _run(self, sid, sess, names, feeds, predicted, sigs, order, early=True):
        """Run with every output bound: into a free slot where its shape is predicted, else where onnxruntime
        puts it (then copied into a slot, and onnxruntime's copy given back at once), or, for an output this
        session keeps (runtime/kept.py), to its device.  ``sigs``: the feeds that came through the feed area, by
        where they lie there; a kept binding whose input lies at the same place with the same dtype and shape
        still points at it (the parent rewrote the bytes), so it is not rebound.

        When every output goes into a predicted slot the reply is known before the run: with ``self.send`` set
        (the child's loop) it is pickled first and sent the moment onnxruntime returns (``order``: the names
        as the request listed them), so nothing stands between the run's end and the parent's wake-up (not for
        ``early=False``: a chain's stage, whose reply is the whole chain's).  A run that also keeps outputs
        pickles its reply first too where each kept output's dtype and shape is predicted (its ids are given
        now), and sends it once the values onnxruntime wrote are seen to be that; otherwise it replies as
        before, from what was written."""
        kept = self.bindings.pop(sid, None)
        last = kept.outs if kept is not None else {}
        plan: dict[str, tuple[Slot, np.dtype, tuple]] = {}
        keep, device, dev = self.keep_on.get(sid) or (frozenset(), "", 0)
        kept_names = [n for n in names if n in keep]
        for n in names:
            if n in keep:
                continue  # left on the device (runtime/kept.py): never a slot
            p = predicted.get(n)
            nbytes = math.prod(p[1]) * p[0].itemsize if p is not None else 0
            slot = self.pool.take(nbytes, (last.get(n) or (None,))[0]) if nbytes > INLINE_BYTES else None
            if p is not None and slot is not None:
                plan[n] = (slot, p[0], p[1])
        # a binding is kept across runs whose outputs all went into slots or stay on the device.  It holds each
        # kept output's last value (onnxruntime allocated it there): written again in place where the parent
        # has dropped it and it has the shape predicted (as a slot is; onnxruntime refuses another shape), and
        # bound anew, empty, where the parent may still read it
        whole = len(plan) + len(kept_names) == len(names)
        if whole and kept is not None and kept.names == names:
            io = kept.io  # rebind only the feeds and the outputs whose slot, shape or value changed
            outs_of = kept.outs
        else:
            io, outs_of = sess.io_binding(), {}
        ins_of = kept.ins if kept is not None and io is kept.io else {}
        for k, v in feeds.items():
            sig = sigs.get(k)
            if sig is None or ins_of.get(k) != sig:  # an inline feed is a new array: rebound every run
                io.bind_cpu_input(k, v)
                ins_of[k] = sig
        # the kept outputs' predicted (dtype, shape), each a dtype kept on the device
        ahead = {n: predicted[n] for n in kept_names if predicted.get(n) is not None and keepable(predicted[n][0])}
        reuse: dict[str, _Held] = {}  # kept output -> its last value, dropped by the parent: written in place
        for n in names:
            sig = (plan[n][0].id, plan[n][1], plan[n][2]) if n in plan else _ON_DEVICE if n in keep else None
            last_v = outs_of.get(n)
            if type(last_v) is _Held:
                p = ahead.get(n)
                if last_v.kid not in self.kept and p is not None and p[0].str == last_v.dtype and p[1] == last_v.shape:
                    reuse[n] = last_v
                    continue
            elif sig is not None and last_v == sig:
                continue
            if n in plan:
                slot, dtype, shape = plan[n]
                io.bind_output(n, "cpu", 0, dtype.type, list(shape), slot.view.ctypes.data)
            elif n in keep:
                io.bind_output(n, device, dev)
            else:
                io.bind_output(n, "cpu")
            outs_of[n] = sig
        bound = {n: p[0] for n, p in plan.items()}
        reply_now = early
        early = None
        kids: dict[str, int] = {}
        if reply_now and self.send is not None and len(bound) + len(ahead) == len(names):
            kids = {n: next(self.kept_ids) for n in ahead}
            items = {n: ("slot", bound[n].id, predicted[n][0].str, predicted[n][1]) for n in bound}
            items.update({n: ("kept", kids[n], predicted[n][0].str, predicted[n][1]) for n in ahead})
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
            if bound or reuse:  # most likely a learned shape was wrong; the retry says what else it was
                raise _Misprediction() from None
            raise
        raws = {}
        if whole and len(reuse) < len(kept_names):  # values onnxruntime allocated: read back, checked
            values = output_values(io)
            raws = {n: values[i] for i, n in enumerate(names) if n in keep and n not in reuse}
            if not all(r.data_type() in KEPT_TYPES for r in raws.values()):
                whole = False  # a kept output of a dtype brought to the host (below, as before)
        if early is not None and raws and not (whole and all(same_kept(raws[n], *ahead[n]) for n in raws)):
            early, kids = None, {}  # a kept value not as predicted: the reply is made from what was written
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
                slots = [bound[n].id for n in bound]
                self.repeats[sid] = _Repeat(
                    list(order), tuple(sigs.items()), slots, io, again, reply[0], kept_names, outs_of
                )
        if whole:
            # onnxruntime wrote every output into its slot or kept it on the device: nothing to fetch, and the
            # binding is reused next run (creating and binding it anew costs ~0.15 ms of a 128-token MiniLM run,
            # measured; binding an on-demand run's 13 kept outputs ~0.1 ms more, at ~8 us each): it holds the
            # kept values, written again in place once the parent dropped them
            got: dict[str, tuple[tuple, _Shaped]] = {
                n: (("slot", bound[n].id, predicted[n][0].str, predicted[n][1]), _Shaped(*predicted[n])) for n in bound
            }
            for n in kept_names:
                was = reuse.get(n)
                held: tuple | None
                if was is None:
                    held = self.keep_raw(raws[n], kids.get(n))
                    if held is None:  # not a kept dtype: ruled out above (``whole``), so never here
                        raise AssertionError(f"{n}: a kept output of a dtype not kept")
                    value = self.kept[held[1]]
                else:
                    held = ("kept", kids[n] if n in kids else next(self.kept_ids), was.dtype, was.shape)
                    value = self.kept[held[1]] = was.value
                got[n] = (held, _Shaped(np.dtype(held[2]), held[3]))
                outs_of[n] = _Held(held[1], held[2], held[3], value)
            raws.clear()
            self.bindings[sid] = _Binding(io, names, outs_of, ins_of)
            return got
        outs = io.get_outputs()
        io.clear_binding_outputs()  # from here ``outs`` holds onnxruntime's buffers alone: each can go on its own
        del io
        copies = sum(_nbytes(o) for n, o in zip(names, outs) if o is not None and n not in bound and n not in keep)
        big = any(
            o is not None and n not in bound and n not in keep and _nbytes(o) > INLINE_BYTES
            for n, o in zip(names, outs)
        )
        shrink = big and worth_shrinking(copies)
        if shrink:
            self._give_back_arena()  # the run's intermediates first: the copies below then add ~one map at most
        got = {}
        for i, n in enumerate(names):
            ov, outs[i] = outs[i], None
            if n in bound:
                dtype, shape = predicted[n]
                got[n] = (("slot", bound[n].id, dtype.str, shape), _Shaped(dtype, shape))
                continue
            held = self.keep_value(ov) if n in keep else None
            if held is not None:
                got[n] = (held, _Shaped(np.dtype(held[2]), held[3]))
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
            if op == "forget_then":  # kept values the parent dropped, sent ahead of its request (runtime/kept.py)
                kids, op, args = args
                self.forget(kids)
            if op not in self.OPS:
                raise ValueError(f"unknown op {op!r}")
            reply = getattr(self, self.OPS[op])(*args)
            if self.trace is not None and op in ("run", "again", "chain", "steps", "chain_steps") and not self.replied:
                self.trace.append((self.received, *self._ort_span, time.perf_counter()))
            # a reply already sent from inside the run is not pickled again (its bookkeeping still runs first)
            data = b"" if self.replied else pickle.dumps(("ok", reply), pickle.HIGHEST_PROTOCOL)
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
                close_map(self.feed_area[1])
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
            self.finite.pop(sid, None)
            self.bindings.pop(sid, None)
            self.repeats.pop(sid, None)
            self.last_run.pop(sid, None)
            self._end_loop(sid)
            self.keep_on.pop(sid, None)


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

    __slots__ = ("names", "feeds", "slots", "io", "reply", "items", "kept", "outs")

    def __init__(self, names: list[str], feeds: tuple, slots: list[int], io, reply: bytes, items: list, kept, outs):
        self.names, self.feeds, self.slots, self.io, self.reply, self.items = names, feeds, slots, io, reply, items
        # the outputs kept on the device (unique, in run order) and the binding's marks (``outs[n]``: a _Held once
        # the run is settled), each written again in place by a repeat
        self.kept: list[str] = kept
        self.outs: dict = outs


_AGAIN = pickle.dumps(("again", None), pickle.HIGHEST_PROTOCOL)  # a repeat's reply to the parent's "again"
_ON_DEVICE = "on the device"  # a _Binding's mark for a kept output bound (empty) to its session's device


class _Held:
    """A _Binding's mark for a kept output bound to the value its last run left there (kept as ``kid``, an
    OrtValue): while ``kid`` is kept for the parent the output is bound anew before a run; once the parent
    dropped it a run with the same dtype and shape writes into it (no allocation, no rebinding, nothing to read
    back: the reply, pickled first, goes out the moment onnxruntime returns, as with slots)."""

    __slots__ = ("kid", "dtype", "shape", "value")

    def __init__(self, kid: int, dtype: str, shape: tuple, value):
        self.kid, self.dtype, self.shape, self.value = kid, dtype, shape, value


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


def serve_child(fd: int, outdir: str, watch: int, parent: int, main: bool) -> None:  # pragma: no cover - the child
    """The posix child's life: end with the parent (even mid-run: a kill -9 of attnviz must not leave us), serve its
    requests on the socket ``fd``, and remove the slots' folder where the parent went without doing so.  Run by
    this file as a script (:func:`attnviz.runtime.child_start.spawn`) and in a forked child (``child_start.fork``)."""
    import shutil
    from multiprocessing.connection import Connection

    from attnviz.runtime.lifetime import die_with_parent

    die_with_parent(parent, watch, signal_ok=main, on_orphan=lambda: shutil.rmtree(outdir, ignore_errors=True))
    try:
        serve(Connection(fd), outdir)
    except (EOFError, OSError):  # a reply the parent was no longer there to read
        pass
    # the parent is gone (its end of the socket closed) without removing the slots' folder: it was killed by a
    # signal or left through os._exit (a parent that stops the child kills it first and removes the folder itself)
    shutil.rmtree(outdir, ignore_errors=True)


if __name__ == "__main__":  # pragma: no cover - the child process: FD OUTDIR WATCH PARENT MAIN
    if os.environ.get("ATTNVIZ_CUDA_CONTEXT_EARLY"):  # (child_start.CUDA_EARLY_ENV: that module is the parent's)
        from attnviz.runtime import cuda_warm

        cuda_warm.start()
    serve_child(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1")
