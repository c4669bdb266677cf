"""The crash-isolation child's kept values (:mod:`attnviz.runtime.kept`): an on-demand session's Q and Kᵀ left where
onnxruntime wrote them (a CUDA session's GPU memory), a head model run on them, and the values dropped once the
parent no longer holds them.  Mixed into :class:`attnviz.runtime.worker.Server`.

Imported by the child, which must not import onnx or the engine: numpy and the small attnviz modules only.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Protocol

import numpy as np

from attnviz import AttnvizError
from attnviz.runtime.isolation import INLINE_BYTES, SharedFeed
from attnviz.runtime.kept import (
    KEPT_TYPES,
    HelperMemory,
    device_id,
    head_run,
    helper_memory,
    keep_device,
    ort_dtype,
)
from attnviz.runtime.slots import Pool, Slot


class _Child(Protocol):
    """What the kept-value requests read of the server they are mixed into."""

    pool: Pool
    sessions: dict[int, tuple]
    keep_on: dict[int, tuple[frozenset[str], str, int]]
    kept: dict[int, Any]
    kept_ids: itertools.count

    def _feed(self, ref: SharedFeed) -> np.ndarray: ...

    def _pack(self, v) -> Any: ...


def output_values(io) -> list:
    """A run's output values, as onnxruntime's own (pybind) OrtValues where the binding exposes them: each an
    independent copy of the value (a later rebinding leaves it be).  The public ``get_outputs`` wraps each one
    and checks it for WebGPU: ~6 us per output (185 us for an on-demand run's 28 on this CPU, measured), on the
    critical path of a kept run's reply; indexing the raw vector costs ~2 us."""
    raw = getattr(io, "_iobinding", None)
    if raw is None:  # an onnxruntime without the attribute: its wrappers, whose ``_ortvalue`` is the raw value
        return [v._ortvalue for v in io.get_outputs()]
    vec = raw.get_outputs()
    return [vec[i] for i in range(len(vec))]


def wrap(raw):
    """An onnxruntime.OrtValue around a raw (pybind) value of :func:`output_values`: what head runs bind."""
    from onnxruntime import OrtValue

    return OrtValue(raw)


def same_kept(raw, dtype: np.dtype, shape: tuple) -> bool:
    """Whether a raw output value is the kept value predicted: ``dtype`` (a kept one) and ``shape``."""
    return KEPT_TYPES.get(raw.data_type()) == dtype.str and tuple(raw.shape()) == shape


def keepable(dtype: np.dtype) -> bool:
    """Whether a kept output of ``dtype`` stays on the device (:data:`attnviz.runtime.kept.KEPT_TYPES`)."""
    return dtype.str in _KEPT_STRS


_KEPT_STRS = frozenset(KEPT_TYPES.values())


class KeptRequests:
    """The server's ``run_kept`` and ``forget`` requests and what its runs keep (``self``: :class:`_Child`)."""

    def keep_for(self: _Child, sid: int, sess, keep) -> None:
        """At a session's creation: ``keep`` = (output names, :func:`~attnviz.runtime.kept.keep_mode`'s value) says
        which outputs its runs leave on its device, where :func:`~attnviz.runtime.kept.keep_device` says so."""
        if not keep:
            return
        names, mode = keep
        device = keep_device(sess.get_providers()[0], mode)
        if device:
            self.keep_on[sid] = (frozenset(names), device, device_id(sess, device))

    def keep_value(self: _Child, ov) -> tuple | None:
        """An output a run left on the device, kept: its reply item ("kept", id, dtype, shape), or None for a
        dtype not kept (the caller brings it to the host as before)."""
        dt = ort_dtype(ov)
        if dt is None:
            return None
        kid = next(self.kept_ids)
        self.kept[kid] = ov
        return ("kept", kid, dt.str, tuple(int(d) for d in ov.shape()))

    def keep_raw(self: _Child, raw, kid: int | None = None) -> tuple | None:
        """:meth:`keep_value` for a raw value of :func:`output_values` (``kid``: the id a reply sent ahead already
        gave it)."""
        word = KEPT_TYPES.get(raw.data_type())
        if word is None:
            return None
        kid = next(self.kept_ids) if kid is None else kid
        self.kept[kid] = wrap(raw)
        return ("kept", kid, word, tuple(int(d) for d in raw.shape()))

    def forget(self: _Child, kids) -> None:
        """Drop the kept values the parent no longer holds (sent ahead of its next request)."""
        for kid in kids:
            self.kept.pop(kid, None)

    def kept_count(self: _Child) -> int:
        """How many values this process keeps for the parent (tests and benches watch it)."""
        return len(self.kept)

    def helper_memory(self: _Child, sid: int) -> HelperMemory:
        """How session ``sid`` (a site's head model) holds memory, as onnxruntime reports it here."""
        return helper_memory(self.sessions[sid][0])

    def run_kept(self: _Child, sid, names, feeds, values, hints, released):
        """A run of session ``sid`` (a site's head model) with ``values`` (input -> kept id) bound where they are
        and ``feeds`` from the host; each output written straight into a slot where ``hints`` (output -> (dtype,
        shape)) says what it will be (page-locked on CUDA: one copy off the device).  Reply: (items, slots
        created, slots deleted)."""
        self.pool.release(released)
        self.pool.run += 1
        sess = self.sessions[sid][0]
        vals = {}
        for k, kid in values.items():
            v = self.kept.get(kid)
            if v is None:
                raise AttnvizError(
                    "this on-demand result's Q and Kᵀ are no longer held by the model's process; run the model again"
                )
            vals[k] = v
        arrays = {k: self._feed(v) if isinstance(v, SharedFeed) else np.asarray(v) for k, v in feeds.items()}
        into: dict[str, np.ndarray] = {}
        taken: dict[str, Slot] = {}
        for n, (dtype, shape) in hints.items():
            dt = np.dtype(dtype)
            nbytes = math.prod(shape) * dt.itemsize
            slot = self.pool.take(nbytes) if nbytes > INLINE_BYTES else None
            if slot is not None:
                taken[n], into[n] = slot, slot.array(dt, tuple(shape))
        try:
            outs = head_run(sess, list(names), arrays, vals, into)
        except BaseException:
            for slot in taken.values():
                self.pool.give_back(slot)
            raise
        items = []
        for n, a in zip(names, outs):
            if n in into and a is into[n]:
                items.append(("slot", taken.pop(n).id, a.dtype.str, a.shape))
            else:
                items.append(self._pack(a))
        for slot in taken.values():  # a hint onnxruntime did not follow: its slot was not written
            self.pool.give_back(slot)
        return items, *self.pool.changes()
