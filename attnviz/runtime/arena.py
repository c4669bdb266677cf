"""The crash-isolation child's CPU memory: one onnxruntime arena shared by its sessions, and when to give the
arena's free memory back to the system after a run's outputs were copied into slots.

Imported by the child, which must not import onnx or the engine: onnxruntime is imported only when the arena is
made.
"""

from __future__ import annotations

import os
import threading

from attnviz.core import limits

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


def worth_shrinking(copies: int) -> bool:
    try:
        with open("/proc/self/statm", "rb") as fh:
            rss = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return True  # no way to tell here: keep the memory promise
    return copies >= SHRINK_SHARE * rss


def shared_arena():
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


_process: list[bool] = []  # in-process: whether process_arena() registered one (once a process)
_lock = threading.Lock()


def process_arena() -> bool:
    """Register :func:`shared_arena` in this process once (the child does at its start), for the sessions made with
    ``shared_arena`` here (``ATTNVIZ_INPROCESS=1``: a kept site's helper sessions, runtime/model.py); whether
    there is one."""
    with _lock:
        if not _process:
            _process.append(shared_arena() is not None)
        return _process[0]
