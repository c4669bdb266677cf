"""Opening an untrusted ONNX file: one-line errors, and no tensor that reads bytes from outside the model's folder.

Every tensor that can name external data is checked — top-level and sparse initializers, tensor attributes,
and the same inside every subgraph (``If`` branches, ``Loop`` / ``Scan`` bodies, at any depth).  onnxruntime
resolves a bare location such as ``secret.bin`` against the *current working directory* when the session is
made from bytes and no folder is configured, so any external tensor anywhere also pins that folder to the
model's own (``external_dir``).
"""

from __future__ import annotations

import functools
import os
import stat
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from attnviz import AttnvizError
from attnviz.core import limits
from attnviz.core.links import hub_linked
from attnviz.core.untrusted import open_regular
from attnviz.runtime.wire import weights_by_reference_in

INLINE_LIMIT = 4096  # external tensors up to this many elements are read now (shape inference needs them inline)


def _node_count(g: onnx.GraphProto) -> int:
    """Nodes of ``g`` and of its subgraphs (If / Loop / Scan bodies); only nodes with a graph attribute are
    looked into (0.5 s at 200,000 nodes on a loaded 2-core machine, against 66 s to inspect them)."""
    n = len(g.node)
    for node in g.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                n += _node_count(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                n += sum(_node_count(x) for x in a.graphs)
    return n


def load_model(path: str | Path) -> tuple[onnx.ModelProto, str | None]:
    """Parse an ONNX file safely: clear one-line errors, external data confined to the model's folder.

    Returns the model and, when it has external data, the folder that data is relative to.  The weights
    are left on disk: onnxruntime reads them itself and the graph we instrument stays small (which is
    also how models over protobuf's 2 GB limit work).
    """
    model, base, _ = load_model_and_data(path)
    return model, base


def load_model_and_data(path: str | Path) -> tuple[onnx.ModelProto, str | None, list[str]]:
    """:func:`load_model`, and the data files beside the model that its tensors come from (not the model file
    itself): what the file's own bytes do not hold (the small tensors among them are read into the graph here,
    after which the graph no longer says where they came from)."""
    path = Path(path)
    if path.is_dir():
        raise AttnvizError(f"{path}: is a folder; give the .onnx file inside it")
    with open_regular(path, "model") as f:  # regular files only (a FIFO would block the read)
        head = f.read(64)
        if not head:
            raise AttnvizError(f"{path}: empty file; re-export or re-download the model")
        if _weights(head):  # a Hugging Face checkpoint's weights, given where its ONNX export was meant
            raise AttnvizError(
                f"{path}: not an ONNX model (it looks like {_weights(head)}); export the model's folder first: "
                "attnviz export-hf FOLDER --out DIR, then open DIR"
            )
        if head[:1] in (b"{", b"<", b"#") or head.startswith((b"PK", b"\x89PNG")):
            raise AttnvizError(f"{path}: not an ONNX model (it looks like a {_sniff(head)} file); open a .onnx file")
        f.seek(0)
        try:
            model = _parse_by_reference(f, path) or onnx.load_model_from_string(f.read())  # never resolves
        except AttnvizError:
            raise
        except Exception:  # protobuf's words ("Error parsing message with type 'onnx.ModelProto': Wire format ...")
            raise AttnvizError(
                f"{path}: not a readable ONNX model (its bytes do not parse as one); the file may be truncated or "
                "corrupt — re-export it"
            ) from None
    if not model.graph.node:
        raise AttnvizError(
            f"{path}: not an ONNX model or an empty graph (no nodes); the file may be truncated or corrupt — re-export it"
        )
    # every later step (labels, the index, the checks below) walks every node in Python: a 200,000-node graph
    # took 80 s to inspect; past the cap it is one line at once (ATTNVIZ_MAX_NODES raises it)
    limits.check("nodes", _node_count(model.graph), f"{path.name}: the graph's nodes")
    bad = _first_undecodable(model)
    if bad is not None:  # protobuf hands invalid UTF-8 in string fields back as bytes: every name must be text
        raise AttnvizError(f"{path}: a {bad} field is not valid UTF-8 text; the file is corrupt — re-export it")
    _check_arity_once(model, path)
    _check_single_definitions(model.graph, path)
    base = path.resolve().parent
    external = [t for t in all_tensors(model) if t.data_location == TensorProto.EXTERNAL]
    # each data file resolved and stat'ed once, however many tensors it holds: a file read by reference names
    # itself in every large weight's stub (hundreds), and each stub cost a resolve and three stats
    files: dict[str, tuple[Path, int]] = {}
    for t in external:
        _check_external_fields(t, path)
        loc = {e.key: e.value for e in t.external_data}.get("location", "")
        if loc not in files:
            files[loc] = _data_file(loc, base, t, path)
        _check_in_bounds(t, *files[loc], path)
    own = path.resolve().name  # references into the model file itself are the parse's own: they stay
    locations = ({e.key: e.value for e in t.external_data}.get("location", "") for t in external)
    others = sorted({loc for loc in locations if loc != own})  # (before the small ones lose their location below)
    if external:
        # small tensors (shapes, scales) must be inline for onnxruntime's shape inference; big weights stay on disk
        from onnx.external_data_helper import load_external_data_for_tensor

        for t in external:
            if {e.key: e.value for e in t.external_data}.get("location") == own:
                continue
            if int(np.prod(t.dims or [1])) <= INLINE_LIMIT:
                fields = {e.key: e.value for e in t.external_data}
                if not fields.get("length") and _stored_bytes(t) is not None:
                    # no length: onnx's loader reads to the end of the file, onnxruntime its shape's bytes (so
                    # several such tensors share one file); read them as onnxruntime reads the large ones
                    t.external_data.add(key="length", value=str(_stored_bytes(t)))
                try:
                    load_external_data_for_tensor(t, str(base))
                except Exception:  # onnx's words name its own internals ("Data of TensorProto ( tensor name: ...")
                    raise AttnvizError(
                        f"{path}: could not read tensor {t.name[:80]!r} from its external data file; the data file "
                        "may be truncated — copy it again beside the model"
                    ) from None
                t.data_location = TensorProto.DEFAULT
                del t.external_data[:]
    return model, (str(base) if external else None), others


MAX_LOCATION = 1024  # characters: a file name beside the model, never a path the OS would refuse as too long


# bits an element of each tensor type takes in an external data file (packed, for the sub-byte types); a type not
# here (strings, a type newer than this table) is not checked
_SUB_BYTE_BITS: dict[int, int] = {TensorProto.UINT4: 4, TensorProto.INT4: 4, TensorProto.FLOAT4E2M1: 4}
_WHOLE_BYTES: dict[int, int] = {
    TensorProto.FLOAT: 4,
    TensorProto.UINT8: 1,
    TensorProto.INT8: 1,
    TensorProto.UINT16: 2,
    TensorProto.INT16: 2,
    TensorProto.INT32: 4,
    TensorProto.INT64: 8,
    TensorProto.BOOL: 1,
    TensorProto.FLOAT16: 2,
    TensorProto.DOUBLE: 8,
    TensorProto.UINT32: 4,
    TensorProto.UINT64: 8,
    TensorProto.COMPLEX64: 8,
    TensorProto.COMPLEX128: 16,
    TensorProto.BFLOAT16: 2,
    TensorProto.FLOAT8E4M3FN: 1,
    TensorProto.FLOAT8E4M3FNUZ: 1,
    TensorProto.FLOAT8E5M2: 1,
    TensorProto.FLOAT8E5M2FNUZ: 1,
}


def _stored_bytes(t: onnx.TensorProto) -> int | None:
    """The bytes ``t``'s elements take in a data file, from its type and shape (None: a type not counted here)."""
    n = int(np.prod(t.dims, dtype=np.int64)) if t.dims else 1
    if t.data_type in _WHOLE_BYTES:
        return n * _WHOLE_BYTES[t.data_type]
    bits = _SUB_BYTE_BITS.get(t.data_type)
    return None if bits is None else (n * bits + 7) // 8


def _data_file(loc: str, base: Path, t: onnx.TensorProto, path: Path) -> tuple[Path, int]:
    """External data ``loc`` (first named by tensor ``t``) as a regular file inside the model's folder ``base``,
    and its size; otherwise one line."""
    target = Path(os.path.realpath(base / loc))  # (Path.resolve would stat it once more)
    if not loc or Path(loc).is_absolute() or base not in target.parents:
        raise AttnvizError(
            f"{path}: external data path {loc!r} of tensor {t.name!r} leaves the model's folder; "
            "refusing to read it (keep external data files beside the model)"
        )
    try:
        st = os.stat(target)
    except (OSError, ValueError):
        st = None
    if (st is None or not stat.S_ISREG(st.st_mode)) and hub_linked(path):  # onnxruntime reads no data file
        raise AttnvizError(  # through a link
            f"{path}: a Hugging Face cache snapshot's link, and its external data {loc!r} is a link too, which "
            "onnxruntime refuses; copy the snapshot's folder with its files (cp -rL SNAPSHOT DIR) and open the copy"
        )
    if st is None or not stat.S_ISREG(st.st_mode):
        raise AttnvizError(
            f"{path}: external data file {loc!r} is missing or not a regular file; copy it beside the model"
        )
    return target, st.st_size


def _check_in_bounds(t: onnx.TensorProto, target: Path, size: int, path: Path) -> None:
    """The bytes ``t`` reads from its data file ``target`` (``size`` bytes) lie inside that file.  Where the tensor records no ``length`` (some
    exporters write none), a truncated file reached onnxruntime, whose refusal ("Deserialize tensor ...
    GetExtDataFromTensorProto ... out of bounds") said to re-export the model; the data file is what to fetch again."""
    fields = {e.key: e.value for e in t.external_data}
    offset = int(fields.get("offset") or 0)  # digits only (_check_external_fields)
    need = int(fields["length"]) if fields.get("length") else _stored_bytes(t)
    if need is None:
        return
    if offset + need > size:
        raise AttnvizError(
            f"{path}: external data file {target.name!r} holds {size:,} bytes and tensor {t.name[:80]!r} needs "
            f"{need:,} from byte {offset:,}; the data file is truncated (or is not this model's) — copy or download it "
            "again"
        )


def _check_external_fields(t: onnx.TensorProto, path: Path) -> None:
    """A tensor's external-data fields are what they claim before any of them is used: a location is a file
    name (no NUL byte, no control character, at most :data:`MAX_LOCATION` characters and 255 bytes a part),
    an offset or a length a plain decimal number.  Otherwise one line: (a NUL byte or a 5,000-character name
    used to reach the OS as an internal error; a NUL in an offset was blamed on a truncated file)."""
    fields = {e.key: e.value for e in t.external_data}
    loc = fields.get("location", "")
    shown = repr(loc[:60] + ("…" if len(loc) > 60 else ""))
    bad = ""
    if any(ord(c) < 32 for c in loc):
        bad = "holds a NUL or control character"
    elif len(loc) > MAX_LOCATION or any(len(part.encode("utf-8", "replace")) > 255 for part in Path(loc).parts):
        bad = f"is {len(loc):,} characters long, no file name"
    if bad:
        raise AttnvizError(
            f"{path}: the external data location {shown} of tensor {t.name[:80]!r} {bad}; the file is corrupt — re-export it"
        )
    for key in ("offset", "length"):
        v = fields.get(key)
        if v is not None and not (v.isascii() and v.isdigit() and len(v) <= 20):
            raise AttnvizError(
                f"{path}: the external data {key} {v[:40]!r} of tensor {t.name[:80]!r} is not a byte count (digits only, at most 20); "
                "the file is corrupt — re-export it"
            )


def _parse_by_reference(f, path: Path) -> onnx.ModelProto | None:
    """The model with its large inline weights as references to their bytes in this same file, or None.

    A wire-level scan (:func:`attnviz.runtime.wire.weights_by_reference_in`) skips the weight bytes, so this
    process never holds the file's bytes or a proto of the weights (the full parse peaked at ~2.6x the file
    size); onnxruntime reads them from the file by offset, and ``Graph.const_value`` reads one when asked.
    The stubs name the file itself, so they pass the external-data checks below like any other reference.
    Any scan failure falls back to protobuf's own parse, which then gives the one-line error.
    """
    try:
        return weights_by_reference_in(f, path.resolve().name)
    except Exception:
        return None
    finally:
        f.seek(0)


def _check_single_definitions(g: onnx.GraphProto, path: Path) -> None:
    """Every tensor has one definition and every graph output is listed once: a name listed twice, or made by two
    nodes, leaves which value a map or an output holds to chance (onnxruntime ran such graphs and reported
    success).  The top-level graph; subgraphs have their own scope."""
    outs = [o.name for o in g.output]
    dup = next((n for n in outs if outs.count(n) > 1), None) if len(set(outs)) != len(outs) else None
    if dup is not None:
        raise AttnvizError(f"{path}: graph output {dup!r} is listed twice; the file is corrupt — re-export it")
    defined = {i.name for i in g.input} | {t.name for t in g.initializer}
    for n in g.node:
        for o in n.output:
            if not o:
                continue  # an optional output left out
            if o in defined:
                raise AttnvizError(
                    f"{path}: tensor {o!r} is defined twice (node {n.name or n.op_type!r} makes it again); "
                    "the file is corrupt — re-export it"
                )
            defined.add(o)


ARITY_KIND = "arity"  # the cache's kind of a file that passed _check_arity (optcache)


def _check_arity_once(model: onnx.ModelProto, path: Path) -> None:
    """:func:`_check_arity`, or nothing where an earlier process checked this very file: the check's first
    ``onnx.defs.get_schema`` builds onnx's schema registry (~9 ms CPU, in each of a corpus command's three processes,
    for nothing else).  Kept (:mod:`attnviz.runtime.optcache`) by the file's sha256 as known from its stat (never
    hashed for this), onnx's version (its schemas) and the code that parses and checks it; only a pass is kept."""
    from attnviz.runtime import optcache

    code = _checking_code()
    key = optcache.file_key(path, ARITY_KIND, [onnx.__version__, code]) if code is not None else None
    if optcache.passed(ARITY_KIND, key):
        return
    _check_arity(model, path)
    optcache.keep_passed(ARITY_KIND, key)


@functools.cache
def _checking_code() -> str | None:
    """sha256 of this module's and the wire parser's sources (what turns the file into the nodes checked); None
    without sources (nothing is kept then: nothing would name the code)."""
    from attnviz.runtime import optcache, wire

    return optcache.sources_digest(__file__, wire.__file__)


def _check_arity(model: onnx.ModelProto, path: Path) -> None:
    """Every standard op has as many inputs / outputs as its schema allows (the graph walks index them)."""
    opsets = {o.domain or "": o.version for o in model.opset_import}
    # per (op, domain): its schema's (min inputs, max inputs, min outputs, max outputs), None without one; looked up
    # once per op type, not per node (~4 us each: 551 nodes of 25 types in MiniLM)
    bounds: dict[tuple[str, str], tuple[int, int, int, int] | None] = {}
    for n in model.graph.node:
        domain = "" if n.domain in ("", "ai.onnx") else n.domain
        if domain not in opsets:
            continue
        key = (n.op_type, domain)
        if key not in bounds:
            bounds[key] = _arity(n.op_type, opsets[domain], domain)
        b = bounds[key]
        if b is None:
            continue
        for what, got, lo, hi in (("inputs", len(n.input), b[0], b[1]), ("outputs", len(n.output), b[2], b[3])):
            if not lo <= got <= hi:
                want = f"{lo}" if lo == hi else f"{lo} to {hi}"
                raise AttnvizError(
                    f"{path}: node {n.name or n.op_type!r} ({n.op_type}) has {got} {what}, the ONNX spec allows {want}; "
                    "the file is corrupt — re-export it"
                )


def _arity(op_type: str, version: int, domain: str) -> tuple[int, int, int, int] | None:
    """onnx's schema of ``op_type`` at the opset ``version`` (else its latest): (min inputs, max inputs, min outputs,
    max outputs); None where onnx has none."""
    try:
        schema = onnx.defs.get_schema(op_type, version, domain)
    except Exception:
        try:
            schema = onnx.defs.get_schema(op_type, domain)
        except Exception:
            return None
    return schema.min_input, schema.max_input, schema.min_output, schema.max_output


def _first_undecodable(msg) -> str | None:
    """The name of the first string field holding bytes (iterative walk over every message in the model)."""
    from google.protobuf.descriptor import FieldDescriptor

    stack = [msg]
    while stack:
        m = stack.pop()
        for field, value in m.ListFields():
            if field.type == FieldDescriptor.TYPE_STRING:
                values = [value] if isinstance(value, (str, bytes)) else value
                if any(isinstance(v, bytes) for v in values):
                    return f"{m.DESCRIPTOR.name}.{field.name}"
            elif field.type == FieldDescriptor.TYPE_MESSAGE:
                stack.extend([value] if hasattr(value, "ListFields") else value)
    return None


def all_tensors(model: onnx.ModelProto):
    """Every TensorProto in the model: initializers, sparse initializers, tensor attributes — in every subgraph
    and local function."""
    stack = [model.graph]
    node_lists = [fn.node for fn in model.functions]
    while stack or node_lists:  # iterative: a deeply nested hostile graph must not hit Python's recursion limit
        if stack:
            g = stack.pop()
            yield from g.initializer
            for s in g.sparse_initializer:
                yield s.values
                yield s.indices
            node_lists.append(g.node)
        for n in node_lists.pop() if node_lists else ():
            for a in n.attribute:
                yield from _attr_tensors(a)
                if a.type == onnx.AttributeProto.GRAPH:
                    stack.append(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    stack.extend(a.graphs)


def _attr_tensors(a: onnx.AttributeProto):
    if a.type == onnx.AttributeProto.TENSOR:
        yield a.t
    elif a.type == onnx.AttributeProto.TENSORS:
        yield from a.tensors
    elif a.type == onnx.AttributeProto.SPARSE_TENSOR:
        yield a.sparse_tensor.values
        yield a.sparse_tensor.indices
    elif a.type == onnx.AttributeProto.SPARSE_TENSORS:
        for s in a.sparse_tensors:
            yield s.values
            yield s.indices


def _weights(head: bytes) -> str | None:
    """What kind of weights file ``head`` (a file's first bytes) starts, or None: safetensors (an 8-byte header
    length, then its JSON header) or a pickle (PyTorch's pre-zip ``pytorch_model.bin``)."""
    if len(head) > 9 and head[8:10] == b'{"' and int.from_bytes(head[:8], "little") < 1 << 32:
        return "safetensors weights"
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return "pickled PyTorch weights"
    return None


def _sniff(head: bytes) -> str:
    if head.startswith(b"PK"):
        return "zip (e.g. a PyTorch .pt or .npz)"
    if head.startswith(b"\x89PNG"):
        return "PNG image"
    return "text/JSON"
