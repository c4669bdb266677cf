"""The parent's feed area for the crash-isolation child: one shared-memory file the feeds are written into
before a request, read by the child in place (:mod:`attnviz.runtime.host`)."""

from __future__ import annotations

import itertools
import mmap
import os

import numpy as np

from attnviz.runtime.isolation import SharedFeed
from attnviz.runtime.slots import _slot_size, close_map, reserve_map


class FeedArea:
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
            mm = reserve_map(path, size)
        except OSError:
            return False
        if mm is None:
            return False
        self.mm = mm
        self.file = name
        return True

    def close(self) -> None:
        if self.mm is not None:
            close_map(self.mm)
            self.mm = None
        if self.file is not None:
            try:  # the child keeps its mapping until it sees the next file's name; the pages go with it
                os.unlink(os.path.join(self.outdir, self.file))
            except OSError:
                pass
            self.file = None
