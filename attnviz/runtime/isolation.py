"""What the crash-isolation parent (host.py), its child (worker.py) and session.py share, importing nothing:
the child and session.py must not import host.py (import cycles), and the parent must not import onnxruntime."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
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
    """A feed the parent wrote into its shared-memory feed area (``feedarea.FeedArea``), sent in place of the array:
    file name in the child's folder, byte offset, numpy dtype string, shape.  A named tuple, not a dataclass:
    one is made, pickled and compared per feed and run, at a quarter of the cost."""

    file: str
    offset: int
    dtype: str
    shape: tuple


class Spliced(NamedTuple):
    """A feed of a chain's later stage made from earlier stages' outputs where the sessions run
    (:func:`attnviz.runtime.chain.splice`): stage ``base[0]``'s output ``base[1]`` (embeddings ``[B, T, H]``) with
    the rows where ``rows`` (bool ``[B, T]``) is true replaced, in order, by stage ``source[0]``'s output
    ``source[1]`` (image features, last axis H), cast to ``dtype``.  ``shape`` and ``dtype`` are what the result
    will be, so the caller's memory check reads it like an array."""

    name: str  # the input it feeds (for the one-line refusals)
    base: tuple[int, str]
    source: tuple[int, str]
    rows: object  # numpy bool [B, T] (isolation.py imports nothing)
    shape: tuple
    dtype: str
    fix: str = "write the image's placeholder once in the text"  # what to do when the counts differ


class Taken(NamedTuple):
    """A feed of a chain's later stage (or of the generation loop after it) that is an earlier stage's output as
    it is (:func:`attnviz.runtime.chain.take`): stage ``source[0]``'s output ``source[1]`` (a speech encoder's
    hidden states into its decoder, the decoder's ``present.*`` into the with-past decoder's cache), cast to
    ``dtype``.  ``shape`` and ``dtype`` are what it will be, so the caller's memory check reads it like an array."""

    name: str  # the input it feeds (for the one-line refusals)
    source: tuple[int, str]
    shape: tuple
    dtype: str


class SlotFeed(NamedTuple):
    """A generation's start feed that is one of the child's own outputs still lent to the parent (a decoder's
    ``present.*`` from the prompt's run, fed back as the loop's cache): sent as the slot's id instead of being
    copied into the feed area and back.  The parent holds the slot while the request runs; the child reads it
    in place during that chunk of steps and copies it only if the loop goes on past it."""

    slot: int
    dtype: str
    shape: tuple


def loop_run(sess) -> Callable[[list[str], dict], list]:
    """An onnxruntime session's run for a generation loop's steps (:func:`attnviz.runtime.steps.advance`): the
    inner session's, without ``InferenceSession.run``'s Python checks of the feed names against the inputs
    (~14 us a step of Whisper's 17-input with-past decoder, measured: 0.4 ms of a 32-token generation), which a
    loop whose feeds are the model's own inputs never fails; the same C++ run, the same outputs.  The public
    run where this onnxruntime has no inner session's run."""
    inner = getattr(getattr(sess, "_sess", None), "run", None)
    if inner is None:
        return sess.run
    return lambda names, feeds: inner(names, feeds, None)


def read_message(fd: int) -> memoryview:
    """One message in ``multiprocessing.connection.Connection``'s framing (a 4-byte big-endian size, or -1 and an
    8-byte size, then the bytes), read from ``fd`` directly: a run's request or reply arrives whole in one read,
    where ``Connection.recv_bytes`` makes two reads and a BytesIO.  Only one message is ever in flight between
    the parent and the child (each request waits for its reply), so a read never takes the start of the next."""
    data = os.read(fd, 1 << 16)
    if len(data) >= 4:
        (size,) = struct.unpack_from("!i", data)
        if size >= 0 and len(data) == 4 + size:
            return memoryview(data)[4:]
    buf = bytearray(data)
    head = 4
    while True:
        if not data:
            raise EOFError("the other process closed the connection")
        if len(buf) >= 4:
            (size,) = struct.unpack_from("!i", buf)
            if size == -1:
                head = 12
                size = struct.unpack_from("!Q", buf, 4)[0] if len(buf) >= 12 else -1
            if size >= 0:
                if len(buf) >= head + size:
                    if len(buf) > head + size:
                        raise OSError("the other process sent two messages at once")
                    return memoryview(buf)[head:]
                want = head + size - len(buf)
            else:
                want = 12 - len(buf)
        else:
            want = 4 - len(buf)
        data = os.read(fd, min(want, 1 << 24))
        buf += data


def write_message(fd: int, data: bytes) -> None:
    """``data`` in ``Connection.send_bytes``'s framing, written to ``fd`` directly (a run's request or reply goes
    out in one write, without the Connection's checks and copies on the way)."""
    n = len(data)
    head = struct.pack("!i", n) if n <= 0x7FFFFFFF else struct.pack("!iQ", -1, n)
    view = memoryview(head + data if n <= 1 << 16 else head)
    while view:
        view = view[os.write(fd, view) :]
    if n > 1 << 16:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
