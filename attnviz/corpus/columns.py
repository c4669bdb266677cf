"""Arrow tables from rows of plain Python values, without pyarrow's pandas check.

``pa.array`` of a Python list (so ``pa.Table.from_pylist``) first imports pandas to ask whether the list is a
pandas object: ~0.2 s of CPU and, at exit, the teardown of everything pandas loaded, for a command that writes two
small Parquet files.  :func:`table` builds the same table from buffers wherever a column holds one plain type.
"""

from __future__ import annotations

import itertools
import operator

import numpy as np
import pyarrow as pa

EXACT_INT = 2**53  # ints a float64 column holds exactly (pyarrow's conversion refuses larger ones)


def table(rows: list[dict], schema: pa.Schema | None = None) -> pa.Table:
    """``pa.Table.from_pylist(rows, schema)``: the columns are the schema's, or the first row's keys (a row
    without a key gives null there); their types the schema's, or inferred as pyarrow infers them."""
    if not rows:
        return pa.Table.from_pylist(rows, schema=schema)  # no column to convert: no pandas either
    if schema is None:
        names = list(rows[0])
        return pa.Table.from_arrays([column([r.get(n) for r in rows]) for n in names], names=names)
    return pa.Table.from_arrays([column([r.get(f.name) for r in rows], f.type) for f in schema], schema=schema)


def column(values: list, dtype: pa.DataType | None = None) -> pa.Array:
    """``pa.array(values, dtype)`` for values that are None or all bool, int, float (ints among them) or str;
    anything else is handed to ``pa.array`` itself (same result, same errors)."""
    n = len(values)
    kinds = set(map(type, values)) - {type(None)}
    if not kinds <= PLAIN:
        return pa.array(values, dtype)
    want = dtype if dtype is not None else _inferred(kinds)
    if want is None:  # a mix pyarrow infers for itself (ints and strings...)
        return pa.array(values, dtype)
    # the per-value passes below iterate in C (map, fromiter over a list, str.join): a generator resumed per value
    # was most of the corpus driver's write (~3,600 example rows x 15 columns)
    nulls = values.count(None)  # (== None is False for every value of these types but None)
    bitmap = None
    if nulls:
        valid = np.fromiter(map(operator.is_not, values, itertools.repeat(None)), bool, n)
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    if want == pa.null() and not kinds:
        return pa.nulls(n)
    if want == pa.bool_() and kinds <= {bool}:
        bits = np.packbits(np.fromiter(map(operator.is_, values, itertools.repeat(True)), bool, n), bitorder="little")
        return pa.Array.from_buffers(want, n, [bitmap, pa.py_buffer(bits)], null_count=nulls)
    if want == pa.int64() and kinds <= {int}:
        try:
            data = np.fromiter(_zeroed(values, 0) if nulls else values, np.int64, n)
        except OverflowError:  # beyond int64: pyarrow's own conversion (and message)
            return pa.array(values, dtype)
        return pa.Array.from_buffers(want, n, [bitmap, pa.py_buffer(data)], null_count=nulls)
    if want == pa.float64() and kinds <= {int, float}:
        if int in kinds and not all(abs(v) <= EXACT_INT for v in values if type(v) is int):
            return pa.array(values, dtype)
        data = np.fromiter(_zeroed(values, 0.0) if nulls else values, np.float64, n)
        return pa.Array.from_buffers(want, n, [bitmap, pa.py_buffer(data)], null_count=nulls)
    if want == pa.string() and kinds <= {str}:
        texts = _zeroed(values, "") if nulls else values
        joined = "".join(texts)
        if joined.isascii():  # one byte a character: each text's length is its UTF-8 length
            raw, sizes = joined.encode("ascii"), map(len, texts)
        else:
            try:
                encoded = [v.encode("utf-8") for v in texts]
            except UnicodeEncodeError:  # a lone surrogate: pyarrow's own message
                return pa.array(values, dtype)
            raw, sizes = b"".join(encoded), map(len, encoded)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(np.fromiter(sizes, np.int64, n), out=offsets[1:])
        if offsets[-1] < 2**31:  # string's int32 offsets (beyond: pyarrow chooses for itself)
            buffers = [bitmap, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(raw)]
            return pa.Array.from_buffers(want, n, buffers, null_count=nulls)
    return pa.array(values, dtype)


PLAIN = {bool, int, float, str}  # the value types this module converts itself


def _zeroed(values: list, zero):
    """``values`` with each None as ``zero`` (a null's slot in the data buffer)."""
    return [zero if v is None else v for v in values]


def _inferred(kinds: set[type]) -> pa.DataType | None:
    """The type pyarrow infers for a list of these Python types (None: not one this module builds)."""
    if not kinds:
        return pa.null()
    if kinds == {bool}:
        return pa.bool_()
    if kinds == {int}:
        return pa.int64()
    if kinds <= {int, float}:
        return pa.float64()
    if kinds == {str}:
        return pa.string()
    return None
