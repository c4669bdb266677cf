"""The crash-isolation child's output slots (:mod:`attnviz.runtime.worker` has the ownership rule): files in a
memory-backed folder that the child and the parent both keep mapped, reused run after run, and the shapes learned
per session that let onnxruntime write a run's outputs straight into them.

Imported by the child, which must not import onnx or the engine: numpy and :mod:`attnviz.runtime.pinning` only.
"""

from __future__ import annotations

import itertools
import mmap
import os

import numpy as np

from attnviz.runtime.pinning import Pinner

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
        mm = reserve_map(path, size, populate=True)
        if mm is None:
            return None
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


def close_map(mm: mmap.mmap) -> None:
    """Close a mapping now, or, while arrays still view it (a slot still lent, a view from a failed run), leave it
    to go when the last of them is collected."""
    try:
        mm.close()
    except BufferError:
        pass


def reserve_map(path: str, size: int, populate: bool = False) -> mmap.mmap | None:
    """A new shared-memory file of ``size`` bytes at ``path``, mapped.  The pages are reserved now, so a full tmpfs
    answers None here (the file removed) instead of a SIGBUS in onnxruntime or numpy mid-write; a failing
    ``open`` (the file exists, the folder is gone) raises OSError.  ``populate``: fault the pages in at once
    (output slots are written by the engine right away; the parent's feed area need not)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(fd, 0, size)
            else:  # macOS: no fallocate (and no /dev/shm: the folder is on disk)
                os.ftruncate(fd, size)
        except OSError:
            os.unlink(path)
            return None
        flags = mmap.MAP_SHARED | (getattr(mmap, "MAP_POPULATE", 0) if populate else 0)
        return mmap.mmap(fd, size, flags=flags)
    finally:
        os.close(fd)
