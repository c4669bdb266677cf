"""Test-only fault: onnxruntime <= 1.31 dies with SIGFPE creating a session for an ONNX ``Attention`` with
``q_num_heads=0``; 1.32 refuses that model instead.  So that the crash-isolation tests keep a real native
fault on any onnxruntime, processes started with this folder on PYTHONPATH (tests/conftest.py puts it there
only when the installed onnxruntime no longer crashes) die by the same signal at the same point.

The patch is applied when onnxruntime is imported (an import hook), so other processes pay nothing.
"""

import importlib.abc
import importlib.machinery
import os
import signal
import sys


def _zero_head_attention(data: bytes) -> bool:
    if b"q_num_heads" not in data:
        return False
    import onnx

    m = onnx.load_from_string(data)
    return any(
        n.op_type == "Attention" and any(a.name == "q_num_heads" and a.i == 0 for a in n.attribute)
        for n in m.graph.node
    )


def _no_core_file() -> None:
    """SIGFPE dumps core: where core files are on (.ci/run turns them on, for a crash of the test process itself),
    the crash-isolation tests' deliberate faults would each leave one in the child's folder."""
    try:
        import resource
    except ImportError:  # not POSIX: no core files either
        return
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))


def _patch(ort) -> None:
    original = ort.InferenceSession.__init__

    def init(self, path_or_bytes, *args, **kwargs):
        data = path_or_bytes
        if isinstance(path_or_bytes, (str, os.PathLike)):
            with open(path_or_bytes, "rb") as f:
                data = f.read()
        if isinstance(data, (bytes, bytearray)) and _zero_head_attention(bytes(data)):
            _no_core_file()
            os.kill(os.getpid(), signal.SIGFPE)
        original(self, path_or_bytes, *args, **kwargs)

    ort.InferenceSession.__init__ = init


class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "onnxruntime":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


sys.meta_path.insert(0, _Hook())
