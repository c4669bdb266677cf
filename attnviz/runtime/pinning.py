"""Page-locking the host buffers a CUDA session's outputs are bound into (stdlib only: the child imports it).

onnxruntime's CUDA provider copies a CPU-bound output from the GPU with ``cudaMemcpy``; into ordinary pageable
memory that copy is staged through a driver buffer (~5-10 GB/s on an H100), into page-locked memory it is one DMA
(~25+ GB/s).  On-demand mode brings Q and Kᵀ of every site home (~69 MB more than plain at 4,096 tokens on
MiniLM), dense mode every map: both pay that difference on each run.  So on CUDA the crash-isolation child
registers each shared-memory slot with ``cudaHostRegister`` once, when the slot is made (slots are reused run
after run), and unregisters it before the slot is unmapped.

The CUDA runtime used is the one onnxruntime's CUDA provider already loaded (found in ``/proc/self/maps``,
opened with ``RTLD_NOLOAD``): never a second copy, and never on a CPU session (nothing here runs before a CUDA
session exists).  Anything that refuses (no runtime loaded, an error code, the locked-memory limit, a platform
without /proc) leaves the buffers pageable: the runs stay the same, only slower, and :attr:`Pinner.state` says
why (``"no (...)"``), which the run's info reports as ``pinned``.  ``ATTNVIZ_PIN=off`` turns it off (benchmarks
compare both).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from typing import Any

__all__ = ["OFF_ENV", "Pinner", "find_cudart", "open_cudart"]

OFF_ENV = "ATTNVIZ_PIN"  # "off": never page-lock
HOST_REGISTER_PORTABLE = 1  # cudaHostRegisterPortable: locked for every CUDA context, not only the caller's


def find_cudart(maps: str = "/proc/self/maps") -> str | None:
    """The path of the CUDA runtime library this process has loaded (``libcudart.so*``), or None."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                path = line.rstrip("\n").split(None, 5)[-1]
                if os.path.basename(path).startswith("libcudart.so"):
                    return path
    except OSError:
        pass
    return None


def open_cudart(path: str) -> Any:
    """The already loaded library at ``path`` (``RTLD_NOLOAD``: fails rather than load another copy)."""
    mode = getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_LAZY", 0) | getattr(os, "RTLD_LOCAL", 0)
    lib = ctypes.CDLL(path, mode=mode)
    lib.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    lib.cudaHostRegister.restype = ctypes.c_int
    lib.cudaHostUnregister.argtypes = [ctypes.c_void_p]
    lib.cudaHostUnregister.restype = ctypes.c_int
    lib.cudaGetErrorName.argtypes = [ctypes.c_int]
    lib.cudaGetErrorName.restype = ctypes.c_char_p
    return lib


def _memlock() -> str:
    """The locked-memory limit, when one is set (the likeliest reason a registration is refused)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    except (ImportError, OSError, ValueError, AttributeError):
        return ""
    return "" if soft == resource.RLIM_INFINITY else f"; RLIMIT_MEMLOCK {soft >> 10} KiB"


class Pinner:
    """Registers buffers with a CUDA runtime and remembers them until unregistered.

    Not started (``state`` ``"no (not a CUDA session)"``) until :meth:`start` is called by the first CUDA session;
    then every buffer :meth:`pin` is given is registered once.  The first refusal unregisters every buffer
    registered so far and stops pinning for good (pageable everywhere, as before), ``state`` naming the reason."""

    def __init__(self, find: Callable[[], str | None] = find_cudart, opener: Callable[[str], Any] = open_cudart):
        self._find, self._open = find, opener
        self.lib: Any = None
        self.state = "no (not a CUDA session)"
        self.started = False
        self.pinned: dict[int, int] = {}  # address -> size, each registered once

    def start(self) -> None:
        """Called once a CUDA session exists (its provider loaded the runtime).  Idempotent."""
        if self.started:
            return
        self.started = True
        if os.environ.get(OFF_ENV, "").lower() in ("off", "0", "no"):
            self.state = f"no (off: {OFF_ENV}={os.environ[OFF_ENV]})"
            return
        path = self._find()
        if path is None:
            self.state = "no (no CUDA runtime library loaded in this process)"
            return
        try:
            self.lib = self._open(path)
        except (OSError, AttributeError) as e:
            self.state = f"no (cannot use {os.path.basename(path)}: {e})"
            return
        self.state = "yes"

    @property
    def active(self) -> bool:
        return self.lib is not None

    def pin(self, addr: int, size: int) -> bool:
        """Register ``size`` bytes at ``addr`` (a buffer that lives until :meth:`unpin`); False where it stays
        pageable."""
        if self.lib is None or size <= 0:
            return False
        if addr in self.pinned:
            return True
        err = self.lib.cudaHostRegister(ctypes.c_void_p(addr), size, HOST_REGISTER_PORTABLE)
        if err != 0:
            self._fail(f"cudaHostRegister of {size >> 20} MiB: {self._name(err)}{_memlock()}")
            return False
        self.pinned[addr] = size
        return True

    def unpin(self, addr: int) -> None:
        """Unregister a buffer :meth:`pin` registered (before it is unmapped); nothing for one it did not."""
        if self.pinned.pop(addr, None) is not None and self.lib is not None:
            self.lib.cudaHostUnregister(ctypes.c_void_p(addr))

    def close(self) -> None:
        """Unregister every buffer still registered (the child's pool at exit)."""
        for addr in list(self.pinned):
            self.unpin(addr)

    def _fail(self, reason: str) -> None:
        self.close()
        self.lib = None
        self.state = f"no ({reason})"

    def _name(self, err: int) -> str:
        try:
            name = self.lib.cudaGetErrorName(err)
        except Exception:
            name = None
        return f"{name.decode(errors='replace') if isinstance(name, bytes) else 'error'} ({err})"
