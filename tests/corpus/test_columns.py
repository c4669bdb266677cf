"""corpus/columns.py builds pyarrow's own ``Table.from_pylist`` tables without pyarrow's pandas import: the Parquet
bytes written from either are compared, over values of every kind a results file holds and some it never should."""

import io
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from attnviz.corpus.columns import table


def parquet(t: pa.Table) -> bytes:
    out = io.BytesIO()
    pq.write_table(t, out)
    return out.getvalue()


def same(rows, schema=None):
    ref = pa.Table.from_pylist(rows, schema=schema)
    got = table(rows, schema)
    assert got.schema == ref.schema
    assert parquet(got) == parquet(ref)
    # NaN-aware value check (Table.equals calls NaN unequal to itself)
    for a, b in zip(got.columns, ref.columns):
        assert len(a) == len(b)
        for x, y in zip(a.to_pylist(), b.to_pylist()):
            assert (x == y and type(x) is type(y)) or (isinstance(x, float) and math.isnan(x) and math.isnan(y))


def random_rows(rng: np.random.Generator, n: int) -> list[dict]:
    words = ["", "a", "sink", "é☃ 日本", "x" * 300, "tab\there", "0"]
    rows = []
    for i in range(n):
        row = {
            "stack": str(rng.choice(["encoder", "decoder"])),
            "layer": int(rng.integers(0, 12)),
            "value": float(rng.choice([rng.normal(), math.nan, math.inf, -math.inf, -0.0, 0.0])),
            "mixed": int(rng.integers(-5, 5)) if rng.random() < 0.5 else float(rng.normal()),
            "maybe_text": None if rng.random() < 0.3 else str(rng.choice(words)),
            "maybe_int": None if rng.random() < 0.3 else int(rng.integers(-(2**62), 2**62)),
            "maybe_float": None if rng.random() < 0.3 else float(rng.normal()),
            "flag": None if rng.random() < 0.2 else bool(rng.random() < 0.5),
            "never": None,
        }
        if i and rng.random() < 0.2:
            del row["maybe_text"]  # missing in a later row: null there
        if rng.random() < 0.2:
            row["extra"] = 1  # a key the first row lacks: not a column
        rows.append(row)
    return rows


@pytest.mark.parametrize("seed", range(6))
def test_random_rows_write_the_bytes_from_pylist_writes(seed):
    rng = np.random.default_rng(seed)
    rows = random_rows(rng, int(rng.integers(1, 200)))
    same(rows)
    schema = pa.schema(
        [
            ("stack", pa.string()),
            ("layer", pa.int64()),
            ("value", pa.float64()),
            ("maybe_text", pa.string()),
            ("maybe_int", pa.int64()),
            ("maybe_float", pa.float64()),
            ("absent", pa.string()),  # no row has it: all null
            ("flag", pa.bool_()),
        ]
    )
    same(rows, schema)


def test_the_results_writers_rows():
    """Rows shaped as output.head_rows / example_rows make them, and the empty tables."""
    heads = [
        {"stack": "encoder", "kind": "self", "layer": 0, "head": h, "items": 10, "tokens": 99, "entropy": 1.25 * h}
        | {"induction": math.nan, "role": "sink" if h else "mixed", "role_score": math.nan if h else 0.5}
        for h in range(4)
    ]
    same(heads)
    examples = [
        {"stack": "decoder", "kind": "self", "layer": 1, "head": 2, "score": "entropy", "rank": r, "item": 7 * r}
        | {"value": -0.5 * r, "row": r, "col": 0, "text": "a b", "pair": None, "image": None, "generated": None}
        | {"generate": None}
        for r in range(3)
    ]
    schema = pa.schema(
        [(n, pa.string()) for n in ("stack", "kind")]
        + [(n, pa.int64()) for n in ("layer", "head")]
        + [("score", pa.string()), ("rank", pa.int64()), ("item", pa.int64()), ("value", pa.float64())]
        + [("row", pa.int64()), ("col", pa.int64())]
        + [(n, pa.string()) for n in ("text", "pair", "image", "generated")]
        + [("generate", pa.int64())]
    )
    same(examples, schema)
    same([], schema)
    same([])


def test_values_it_does_not_build_go_through_pyarrow():
    """Types outside bool/int/float/str, ints beyond int64 or beyond a float's exact range, mixed types, lone
    surrogates: pyarrow converts them, or refuses them with the same exception, as from_pylist does."""
    cases = [
        [{"a": np.float32(1.5), "b": np.int64(3), "e": 0.5}, {"a": 2.0, "b": 4, "e": None}],
        [{"c": 2**64}, {"c": 1}],
        [{"c": -(2**63) - 1}],
        [{"d": 2**60 + 1}, {"d": 0.5}],
        [{"t": "x"}, {"t": 1}],
        [{"t": True}, {"t": 1}],
        [{"t": "\ud800"}],
        [{"t": b"bytes"}],
    ]
    for rows in cases:
        try:
            pa.Table.from_pylist(rows)
        except Exception as e:
            with pytest.raises(type(e)):
                table(rows)
            continue
        same(rows)
