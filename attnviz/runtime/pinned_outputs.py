"""In-process CUDA sessions (``ATTNVIZ_INPROCESS=1``): outputs bound into page-locked host buffers kept across runs.

The crash-isolation child page-locks its shared-memory slots (runtime/worker.py's Pool); a session run in the
caller's own process has no slots: onnxruntime allocates each output's host copy anew, pageable, every run.  Here
such a session binds each large output whose shape the last run on the same feed shapes showed into a buffer of
this process's :class:`Buffers`, registered with CUDA once (runtime/pinning.py) and reused by later runs once no
array viewing it is left (every numpy view of a buffer keeps the buffer's base array referenced, so its reference
count says when it is free).  Buffers are anonymous mappings (whole pages: two registrations never share one).

Anything unknown (the first run, a new shape, pinning refused or off) runs as before: outputs bound to "cpu".
"""

from __future__ import annotations

import math
import mmap
import sys
import threading
from typing import Any

import numpy as np

from attnviz.runtime.isolation import INLINE_BYTES
from attnviz.runtime.pinning import Pinner

__all__ = ["Buffers", "PinnedOutputs", "shared_buffers"]

KEEP_RUNS = 4  # a free buffer unused for this many runs is unregistered and unmapped
MAX_PINNED = 2 << 30  # never page-lock more than this (results a caller keeps hold theirs): then pageable as before


class _Buf:
    __slots__ = ("mm", "base", "cap", "used", "idle")

    def __init__(self, cap: int, used: int):
        self.mm = mmap.mmap(-1, cap)
        self.base = np.frombuffer(self.mm, np.uint8)
        self.cap, self.used = cap, used
        self.idle = self._refs()  # with no view of it anywhere (counted the same way: no interpreter's details)

    def _refs(self) -> int:
        return sys.getrefcount(self.base)

    def free(self) -> bool:
        return self._refs() <= self.idle  # each view numpy made of it holds one reference to it

    @property
    def addr(self) -> int:
        return self.base.ctypes.data


class Buffers:
    """This process's page-locked output buffers."""

    def __init__(self, pinner: Pinner):
        self.pinner = pinner
        self.bufs: list[_Buf] = []
        self.run = 0
        # runs from several threads at once (a corpus worker's runs in flight on one session): a buffer is taken,
        # and viewed (which marks it taken), under this lock, so that no two runs are bound into one buffer
        self.lock = threading.Lock()

    def take(self, nbytes: int) -> np.ndarray | None:
        """A free page-locked buffer of at least ``nbytes`` (its base array: views of it keep it taken), or None
        where none can be had (then the output goes where onnxruntime puts it)."""
        size = -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE
        fits = [b for b in self.bufs if size <= b.cap <= 2 * size and b.free()]
        if fits:
            buf = min(fits, key=lambda b: b.cap)
        else:
            if not self.pinner.active or sum(b.cap for b in self.bufs) + size > MAX_PINNED:
                return None
            buf = _Buf(size, self.run)
            if not self.pinner.pin(buf.addr, size):
                self._drop(buf)
                return None
            self.bufs.append(buf)
        buf.used = self.run
        return buf.base

    def trim(self) -> None:
        for b in [b for b in self.bufs if self.run - b.used >= KEEP_RUNS and b.free()]:
            self.bufs.remove(b)
            self._drop(b)

    def close(self) -> None:
        """Unregister every buffer (pinning refused later, or the process leaving); arrays still viewing one stay
        valid (pageable from now on)."""
        for b in self.bufs:
            self.pinner.unpin(b.addr)
        self.bufs = []

    def _drop(self, b: _Buf) -> None:
        self.pinner.unpin(b.addr)
        del b.base  # the mapping's export goes first
        b.mm.close()


_shared: Buffers | None = None


def shared_buffers() -> Buffers:
    """The process's buffers, page-locking started (called once a CUDA session exists, never for a CPU one)."""
    global _shared
    if _shared is None:
        import atexit

        pinner = Pinner()
        pinner.start()
        _shared = Buffers(pinner)
        atexit.register(_shared.close)  # before the CUDA runtime's own teardown (a C atexit handler, later)
    return _shared


class PinnedOutputs:
    """One session's runs with its large outputs bound into :class:`Buffers` (shapes learned per feed shapes)."""

    def __init__(self, buffers: Buffers):
        self.buffers = buffers
        self.memo: tuple[tuple, dict[str, tuple[np.dtype, tuple]]] = ((), {})

    def run(self, sess: Any, names: list[str], feeds: dict) -> list[np.ndarray]:
        bufs = self.buffers
        feeds = {k: np.ascontiguousarray(v) for k, v in feeds.items()}
        key = tuple((k, v.dtype.str, v.shape) for k, v in feeds.items())
        memo = self.memo
        shapes = memo[1] if memo[0] == key else {}
        io = sess.io_binding()
        for k, v in feeds.items():
            io.bind_cpu_input(k, v)
        bound: dict[str, np.ndarray] = {}
        with bufs.lock:
            bufs.run += 1
            for n in dict.fromkeys(names):
                known = shapes.get(n)
                nbytes = math.prod(known[1]) * known[0].itemsize if known is not None else 0
                base = bufs.take(nbytes) if nbytes > INLINE_BYTES else None
                if known is not None and base is not None:
                    arr = bound[n] = base[:nbytes].view(known[0]).reshape(known[1])
                    io.bind_output(n, "cpu", 0, known[0].type, list(known[1]), arr.ctypes.data)
                else:
                    io.bind_output(n, "cpu")
        try:
            sess.run_with_iobinding(io)
        except Exception:
            if not bound:
                raise
            self.memo = ((), {})  # a learned shape was wrong (data-dependent): run as before, and learn anew
            return self.run(sess, names, feeds)
        if len(bound) < len(dict.fromkeys(names)):
            got = dict(zip(dict.fromkeys(names), io.get_outputs()))
            out = {n: bound[n] if n in bound else got[n].numpy() for n in got}
            self.memo = (key, {n: (a.dtype, a.shape) for n, a in out.items()})
        else:
            out = bound
        del io
        with bufs.lock:
            bufs.trim()  # (after a refused registration the pinner unregistered them all: they age out pageable)
        return [out[n] for n in names]
