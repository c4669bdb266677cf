"""What the crash-isolation parent (host.py), its child (worker.py) and session.py share, importing nothing:
the child and session.py must not import host.py (import cycles), and the parent must not import onnxruntime."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import NamedTuple

PROVIDERS = ("auto", "cpu", "cuda")
INLINE_BYTES = 1 << 16  # smaller outputs are pickled through the socket: a shared slot would cost more than it saves


def gpu_present() -> bool:
    """Cheap check before asking onnxruntime for CUDA (which prints loader errors on machines without one)."""
    if os.environ.get("ATTNVIZ_FORCE_CPU"):
        return False
    return any(os.path.exists(p) for p in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg")) or os.name == "nt"


@dataclass(frozen=True)
class NodeArg:
    """What ``InferenceSession.get_inputs()/get_outputs()`` items offer that callers use."""

    name: str
    type: str
    shape: tuple


class SharedFeed(NamedTuple):
    """A feed the parent wrote into its shared-memory feed area (``host._FeedArea``), sent in place of the array:
    file name in the child's folder, byte offset, numpy dtype string, shape.  A named tuple, not a dataclass:
    one is made, pickled and compared per feed and run, at a quarter of the cost."""

    file: str
    offset: int
    dtype: str
    shape: tuple
