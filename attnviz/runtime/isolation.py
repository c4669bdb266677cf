"""What the crash-isolation parent (host.py), its child (worker.py) and session.py share, importing nothing:
the child and session.py must not import host.py (import cycles), and the parent must not import onnxruntime."""

from __future__ import annotations

from dataclasses import dataclass

PROVIDERS = ("auto", "cpu", "cuda")
INLINE_BYTES = 1 << 16  # smaller outputs are pickled through the socket: a shared slot would cost more than it saves


@dataclass(frozen=True)
class NodeArg:
    """What ``InferenceSession.get_inputs()/get_outputs()`` items offer that callers use."""

    name: str
    type: str
    shape: tuple


@dataclass(frozen=True)
class SharedFeed:
    """A feed the parent wrote into its shared-memory feed area (``host._FeedArea``), sent in place of the array:
    file name in the child's folder, byte offset, numpy dtype string, shape."""

    file: str
    offset: int
    dtype: str
    shape: tuple
