"""The crash-isolation child's generation requests: a chunk of greedy cached steps run beside a session, the
cache kept in the child between chunks (:mod:`attnviz.runtime.steps`), and a chain's stages with a new
generation's first chunk after them as one request.  Mixed into :class:`attnviz.runtime.worker.Server`.

Imported by the child, which must not import onnx or the engine: numpy and the small attnviz modules only.
"""

from __future__ import annotations

import math
import time
from typing import Any, Protocol

import numpy as np

from attnviz import AttnvizError
from attnviz.runtime.chain import first_token, reads, resolve
from attnviz.runtime.finite import all_finite
from attnviz.runtime.isolation import INLINE_BYTES, SharedFeed, SlotFeed, Taken, loop_run
from attnviz.runtime.slots import Pool, Slot
from attnviz.runtime.steps import Loop, Rows, advance, step_run


class _Child(Protocol):
    """What the generation requests read of the server they are mixed into (:class:`~attnviz.runtime.worker.Server`)."""

    pool: Pool
    sessions: dict[int, tuple]
    finite: dict[int, frozenset[str]]
    loops: dict[int, Loop]
    _ort_span: tuple[float, float]

    def _feed(self, ref: SharedFeed) -> np.ndarray: ...

    def _pack(self, v) -> Any: ...

    def _chain(self, stages, read: set[tuple[int, str]]) -> tuple[list[dict[str, np.ndarray]], list[list]]: ...

    def _finite_stages(self, stages, items: list[list]) -> list[dict[str, bool]]: ...

    def _release_items(self, items: list[list]) -> None: ...

    def _loop(self, plan, feeds: dict, length: int, embed_sid, outs: list, borrowed: dict, total: int) -> Loop: ...

    def _end_loop(self, sid) -> None: ...

    def _rows_array(self, shape: tuple[int, ...]) -> tuple[np.ndarray, Slot | None]: ...

    def _rows_item(self, loop: Loop, name: str, rows: np.ndarray) -> tuple: ...

    def _chunk(self, sid, token, n, eos, budget, borrowed: dict) -> tuple[list[int], bool, list[str], list, dict]: ...


class StepRequests:
    """The server's ``steps`` and ``chain_steps`` requests (their ``self`` is the server: :class:`_Child`)."""

    def steps(self: _Child, sid, start, token, n, eos, budget, released):
        """A chunk of greedy cached steps run here (:func:`attnviz.runtime.steps.advance`), the cache kept in
        this process between chunks.  ``start``: (plan, feeds, cache length) for a new generation, None to go
        on.  Reply: (ids, finished, map output names, their items, the checked ones' NaN/Inf verdicts, slots
        created, slots deleted)."""
        self.pool.release(released)
        self.pool.run += 1
        borrowed: dict[str, np.ndarray] = {}
        t0 = time.perf_counter()
        if start is not None:
            plan, feeds, length, embed_sid = start
            self._end_loop(sid)  # a generation left unfinished (cancelled): its cache goes before the next's
            self.loops[sid] = self._loop(plan, feeds, length, embed_sid, [], borrowed, n)
        ids, finished, names, items, finite = self._chunk(sid, token, n, eos, budget, borrowed)
        self._ort_span = (t0, time.perf_counter())
        return ids, finished, names, items, finite, *self.pool.changes()

    def chain_steps(self: _Child, stages, sid, start, n, eos, budget, released):
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
        self._end_loop(sid)  # a generation left unfinished (cancelled): its cache goes before the next's
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
                self.loops[sid] = self._loop(plan, feeds, length, embed_sid, outs, borrowed, n - 1)
                more, finished, names, items, finite = self._chunk(sid, token, n - 1, eos, budget, borrowed)
                ids += more
        except BaseException:
            self._end_loop(sid)
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

    def _loop(self: _Child, plan, feeds: dict, length: int, embed_sid, outs: list, borrowed: dict, total: int) -> Loop:
        """A new generation's loop of up to ``total`` steps on ``feeds``: those from the feed area (rewritten by
        the parent's next request), slots lent to the parent (handed back by a later request) and a chain's outputs
        (lent with this reply) are read in place during the first chunk (a Whisper cache is 2 MB) and noted in
        ``borrowed``, to be copied by :meth:`_chunk` only when the loop goes on past it.  Its steps' map rows go
        into slots taken for the whole generation (:class:`~attnviz.runtime.steps.Rows`), named by the reply of
        its last chunk alone."""
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
        rows = Rows(dict(plan.maps), total, self._rows_array, self.pool.give_back, plan.reserve)
        return Loop(plan, own, int(length), embed, rows)

    def _rows_array(self: _Child, shape: tuple[int, ...]) -> tuple[np.ndarray, Slot | None]:
        """A generation's rows of one map output (:class:`~attnviz.runtime.steps.Rows`): in a slot, taken until
        the reply that names it (or given back when none will); small ones in this process's memory, as
        :meth:`_pack` keeps them inline."""
        nbytes = math.prod(shape) * 4
        slot = self.pool.take(nbytes) if nbytes > INLINE_BYTES else None
        if slot is None:
            return np.empty(shape, np.float32), None
        return slot.array(np.dtype(np.float32), shape), slot

    def _end_loop(self: _Child, sid) -> None:
        """Drop session ``sid``'s generation before its end (cancelled, failed, replaced): its cache, and the
        slots its rows were going into (no reply names them)."""
        loop = self.loops.pop(sid, None)
        if loop is not None and loop.rows is not None:
            loop.rows.close()

    def _chunk(
        self: _Child, sid, token, n, eos, budget, borrowed: dict
    ) -> tuple[list[int], bool, list[str], list, dict]:
        """A chunk of the loop of session ``sid``: (ids, finished, map output names, their items, the checked
        ones' NaN/Inf verdicts)."""
        loop = self.loops.get(sid)
        if loop is None:
            raise AttnvizError("generation lost its cache (the model's process restarted); generate again")
        try:
            chunk = advance(loop, token, n, eos, step_run(self.sessions[sid][0], loop.plan), budget)
        except BaseException:
            self._end_loop(sid)
            raise
        if chunk.finished or len(chunk.ids) >= n:
            self.loops.pop(sid, None)  # the caller asks for exactly the steps it still needs (the rows: lent below)
        else:
            for k, v in borrowed.items():
                if loop.feeds.get(k) is v:  # still the parent's bytes (the encoder's half of a cache stays)
                    loop.feeds[k] = np.array(v)
        names = list(chunk.maps)
        checked = self.finite.get(sid, frozenset())
        try:
            finite = {k: all_finite(chunk.maps[k]) for k in names if k in checked}
            items = [self._rows_item(loop, k, chunk.maps[k]) for k in names]
        except BaseException:
            if loop.rows is not None:
                loop.rows.close()  # no reply will name its slots
            raise
        return chunk.ids, chunk.finished, names, items, finite

    def _rows_item(self: _Child, loop: Loop, name: str, rows: np.ndarray) -> tuple:
        """A reply's item for a generation's rows of one output: the slot they were written into, lent from now on
        (with the rows and keys written where that is less than the slot's array: the parent views that part),
        else packed as any output is."""
        slot = loop.rows.tokens.get(name) if loop.rows is not None else None
        if loop.rows is None or not isinstance(slot, Slot):
            return self._pack(rows)
        # written by every chunk: its age counts from now (stamped when taken, a long generation's slots would be
        # trimmed as stale the moment the parent hands them back, and made anew for the next generation)
        slot.used = self.pool.run
        whole = loop.rows.arrays[name]
        item = ("slot", slot.id, whole.dtype.str, whole.shape)
        return item if rows.shape == whole.shape else (*item, rows.shape[-2:])
