"""Protobuf wire-level scan of an ``.onnx`` file: the model's structure with large weights left in the file.

No ``attnviz`` imports: both :mod:`attnviz.runtime.loading` (which parses by reference) and
:mod:`attnviz.runtime.graph` use it.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto

from attnviz.core.untrusted import open_regular


def weights_by_reference(path: str | Path, min_bytes: int = 1024) -> onnx.ModelProto | None:
    """The model's structure with every large inline weight replaced by a reference to its bytes in the file.

    The ``.onnx`` file is scanned at the protobuf wire level through ``mmap`` (weight bytes are skipped, never
    read); each top-level initializer's ``raw_data`` becomes external data pointing at its own offset in the same
    file.  onnxruntime then reads the weights from the file as plain inference does, and Python never holds
    them: instrumented copies are a few hundred kB.  Returns None for layouts this does not cover (already
    external data, no raw_data), which then keep the fully loaded proto.
    """
    path = Path(path)
    with open_regular(path, "model") as f:
        return weights_by_reference_in(f, path.resolve().name, min_bytes)


def weights_by_reference_in(f, location: str, min_bytes: int = 1024) -> onnx.ModelProto | None:
    """:func:`weights_by_reference` over an open binary file ``f`` whose name in its folder is ``location``."""
    import mmap

    with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        graph_span, changed = None, False
        for fno, wt, vs, ve, ts in _wire_fields(mm, 0, len(mm)):
            if fno == 7 and wt == 2:  # ModelProto.graph
                graph_span = (ts, vs, ve)
        if graph_span is None:
            return None
        ts, vs, ve = graph_span
        pieces = []
        for fno, wt, fvs, fve, fts in _wire_fields(mm, vs, ve):
            if fno == 5 and wt == 2:  # GraphProto.initializer
                stub = _tensor_stub(mm, fvs, fve, location, min_bytes)
                if stub is not None:
                    pieces.append(_key(5, 2) + _varint(len(stub)) + stub)
                    changed = True
                    continue
            pieces.append(mm[fts:fve])
        if not changed:
            return None
        graph = b"".join(pieces)
        out = [mm[:ts], _key(7, 2) + _varint(len(graph)) + graph, mm[ve:]]
        return onnx.ModelProto.FromString(b"".join(out))


def _tensor_stub(mm, start: int, end: int, location: str, min_bytes: int) -> bytes | None:
    """TensorProto bytes without ``raw_data``, marked external at the raw bytes' offset in the file."""
    raw = None
    keep = []
    for fno, wt, vs, ve, ts in _wire_fields(mm, start, end):
        if fno in (13, 14):  # already external: leave it alone
            return None
        if fno == 9 and wt == 2:
            raw = (vs, ve)
            continue
        keep.append(mm[ts:ve])
    if raw is None or raw[1] - raw[0] < min_bytes:
        return None
    entries = b""
    for k, v in (("location", location), ("offset", str(raw[0])), ("length", str(raw[1] - raw[0]))):
        kv = _key(1, 2) + _varint(len(k)) + k.encode() + _key(2, 2) + _varint(len(v.encode())) + v.encode()
        entries += _key(13, 2) + _varint(len(kv)) + kv
    return b"".join(keep) + entries + _key(14, 0) + _varint(TensorProto.EXTERNAL)


def _wire_fields(buf, start: int, end: int):
    """(field number, wire type, value start, value end, tag start) of each field in ``buf[start:end]``."""
    i = start
    while i < end:
        ts = i
        key, i = _read_varint(buf, i)
        fno, wt = key >> 3, key & 7
        if wt == 0:
            _, j = _read_varint(buf, i)
            vs, i = i, j
        elif wt == 1:
            vs, i = i, i + 8
        elif wt == 2:
            n, vs = _read_varint(buf, i)
            i = vs + n
        elif wt == 5:
            vs, i = i, i + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wt}")
        if i > end:
            raise ValueError("truncated protobuf field")
        yield fno, wt, vs, i, ts


def _read_varint(buf, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise ValueError("bad varint")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _key(field: int, wt: int) -> bytes:
    return _varint(field << 3 | wt)
