"""Buffers a thread reuses from one corpus batch to the next, for the numpy temporaries of its fold.

A batch's [B, heads, statistics] arrays are ~180 KB each (MiniLM, 32 items): past glibc's mmap threshold, or
trimmed off the heap's top once freed, so that each fresh one is new memory the kernel maps page by page on first
touch.  That cost more than the arithmetic done in them (a fold of ~0.8 ms host time, ~0.4 of it in page faults;
bench/RESULTS.md, session 23 fold23).  A buffer here is touched once and then reused.
"""

from __future__ import annotations

import threading

import numpy as np

_local = threading.local()


def scratch(name: str, size: int, dtype: type | np.dtype) -> np.ndarray:
    """A flat buffer of ``size`` elements named ``name``, this thread's own (folds may run on several threads),
    contents undefined; grown as needed, never shrunk.  The caller's use of it ends before its next call with the
    same name on this thread: nothing it returns may view it."""
    bufs = _local.__dict__.setdefault("bufs", {})
    buf = bufs.get(name)
    if buf is None or buf.size < size or buf.dtype != dtype:
        buf = bufs[name] = np.empty(max(size, 1), dtype)
    return buf[:size]
