"""The one cleaner of onnxruntime's words (attnviz.runtime.errors.ort_message) on onnxruntime's real texts: a tiny
graph built with onnx.helper, fed the wrong rank, the wrong dtype, no value for an input, an index out of range and
a shape it cannot reshape to; a graph with an unknown op.  Each cleaned text is one line, without onnxruntime's
code prefix or a C++ file:line, and keeps the words that say what is wrong."""

from __future__ import annotations

import re

import numpy as np
import pytest

from attnviz import AttnvizError
from attnviz.runtime.errors import MAX_CHARS, ort_message

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

CPP_PLACE = re.compile(r"\.(cc|cpp|h|hpp|cu):\d+")


def graph(nodes, inputs, initializers=()) -> bytes:
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph(nodes, "g", inputs, [y], initializer=list(initializers))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])
I = helper.make_tensor_value_info("i", TensorProto.INT64, [2])
GATHER = graph([helper.make_node("Gather", ["x", "i"], ["y"], axis=1)], [X, I])
RESHAPE = graph(
    [helper.make_node("Reshape", ["x", "s"], ["y"])], [X], [helper.make_tensor("s", TensorProto.INT64, [1], [5])]
)
UNKNOWN_OP = graph([helper.make_node("Foo", ["x"], ["y"])], [X])

x13, i2 = np.zeros((1, 3), np.float32), np.zeros(2, np.int64)
RUNS = {  # what is wrong -> (graph, feeds, words onnxruntime uses for it)
    "wrong rank": (GATHER, {"x": np.zeros(3, np.float32), "i": i2}, "Invalid rank for input: x"),
    "wrong dtype": (GATHER, {"x": x13.astype(np.int64), "i": i2}, "Unexpected input data type"),
    "missing input": (GATHER, {"x": x13}, "Required inputs (['i']) are missing"),
    "index out of range": (GATHER, {"x": x13, "i": np.array([0, 7], np.int64)}, "indices element out of data bounds"),
    "cannot reshape": (RESHAPE, {"x": x13}, "cannot be reshaped to the requested shape"),
}


def raw_error(model: bytes, feeds: dict | None) -> Exception:
    try:
        s = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        if feeds is not None:
            s.run(None, feeds)
    except Exception as e:
        return e
    raise AssertionError("onnxruntime accepted it")


def assert_clean(line: str, words: str) -> None:
    assert words in line
    assert "\n" not in line and "[ONNXRuntimeError]" not in line and not CPP_PLACE.search(line)
    assert not re.search(r"\b[A-Z_]{6,} :", line)  # onnxruntime's status code ("INVALID_ARGUMENT :")
    assert not re.search(r"\bInvalid\w+: ", line)  # nor its exception's class name


@pytest.mark.parametrize("what", list(RUNS))
def test_a_run_error_is_one_clean_line(what):
    model, feeds, words = RUNS[what]
    line = ort_message(raw_error(model, feeds))
    assert_clean(line, words)
    assert len(line) <= MAX_CHARS


def test_the_reshape_error_really_carries_a_cpp_place_and_loses_only_that():
    """The release build puts the C++ check's place and function in this one; the cleaner keeps the rest."""
    raw = str(raw_error(RESHAPE, {"x": x13}))
    if not CPP_PLACE.search(raw):
        pytest.skip("this onnxruntime build names no C++ place here")
    clean = ort_message(RuntimeError(raw))
    tail = raw[raw.index("The input tensor") :].strip()
    assert clean.endswith(" ".join(tail.split())) and "onnxruntime::" not in clean and "was false" not in clean


def test_a_load_error_is_one_clean_line():
    assert_clean(ort_message(raw_error(UNKNOWN_OP, None)), "No Op registered for Foo")


def test_a_long_message_is_cut_with_a_mark():
    line = ort_message(RuntimeError("[ONNXRuntimeError] : 1 : FAIL : " + "word " * 200))
    assert len(line) == MAX_CHARS and line.endswith("…") and line.startswith("word word")


def test_the_crash_isolation_child_reports_the_reason_cleaned(monkeypatch):
    """Through attnviz's own session in the crash-isolation child (which sends onnxruntime's text back with the
    exception's class name before it): a graph onnxruntime refuses is named with the cleaned reason."""
    from attnviz.runtime.host import make_session

    monkeypatch.delenv("ATTNVIZ_INPROCESS", raising=False)
    with pytest.raises(AttnvizError) as e:
        s = make_session(UNKNOWN_OP, provider="cpu", label="foo.onnx")
        s.run(["y"], {"x": x13})
    msg = str(e.value)
    assert msg.startswith("foo.onnx: onnxruntime cannot load this model: This is an invalid model.")
    assert_clean(msg, "No Op registered for Foo")
