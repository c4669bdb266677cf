"""The CUDA context made early, on a thread of its own, while the process still imports.

A process's first CUDA session spends much of its making on the CUDA driver creating the device's primary context
(cuInit, page tables, the context itself), which onnxruntime's CUDA provider then takes through the runtime API.
A corpus worker knows it will run on CUDA from its first instruction but reaches ``InferenceSession`` only after
~0.4 s of imports (numpy, the run's modules, onnxruntime): made on a thread from that first instruction, the
context is ready (or nearly) when the session asks for it.  The calls go through ctypes, which releases the GIL,
so the imports go on meanwhile.  Plain Python: no numpy, no onnxruntime (those are what it overlaps).

Only the driver library (``libcuda.so.1``, installed with the NVIDIA driver) is used; where it is missing or any
call fails nothing happens and the session makes its context itself, as before.  The context is retained for the
life of the process (onnxruntime's sessions use the same primary context; it goes with the process)."""

from __future__ import annotations

import ctypes
import sys
import threading

_LIBRARIES = {"linux": ("libcuda.so.1",), "win32": ("nvcuda.dll",)}
_started: threading.Thread | None = None


def start(device: int = 0) -> bool:
    """Begin making ``device``'s primary context on a daemon thread (once a process); whether a thread started."""
    global _started
    names = _LIBRARIES.get(sys.platform, ())
    if _started is not None or not names:
        return False
    _started = threading.Thread(target=_retain, args=(names, device), name="attnviz-cuda-context", daemon=True)
    _started.start()
    return True


def wait(timeout: float | None = None) -> None:
    """Until the thread of :func:`start` is done (benches; a session need not wait: the driver serialises)."""
    if _started is not None:
        _started.join(timeout)


def _retain(names: tuple[str, ...], device: int) -> None:
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        return
    try:
        dev = ctypes.c_int()
        ctx = ctypes.c_void_p()
        if lib.cuInit(0) == 0 and lib.cuDeviceGet(ctypes.byref(dev), device) == 0:
            lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    except Exception:  # (a driver library without these entry points: the session makes its context itself)
        pass
