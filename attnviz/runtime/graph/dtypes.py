"""The element type of a tensor in a graph or body, without running shape inference over the whole model.

A tensor threaded out of an ``If`` / ``Loop`` body must be declared with its element type (onnxruntime checks a
body's outputs against what its nodes produce).  Exports rarely declare value_info inside bodies, and an fp16
conversion (``onnxruntime.transformers.float16``, the Hub's ``_fp16`` files) turns a probability tensor into
float16 while its name stays the same, so "float32 unless declared" is wrong there.  The type is read from the
declaration when there is one, else from the producer: a ``Cast`` says its ``to``, a type-preserving op has
the type of its data input (walked up a bounded number of steps).
"""

from __future__ import annotations

from onnx import TensorProto, helper

from attnviz.runtime.graph.index import Graph, _attr

# ops whose output has the element type of the input at this position (the data operand, not a condition)
SAME_AS_INPUT = {
    **dict.fromkeys(
        (
            "Softmax",
            "LogSoftmax",
            "Add",
            "Sub",
            "Mul",
            "Div",
            "MatMul",
            "FusedMatMul",
            "Reshape",
            "Transpose",
            "Identity",
            "Dropout",
            "Tanh",
            "Max",
            "Min",
            "Clip",
            "Squeeze",
            "Unsqueeze",
            "Expand",
            "Slice",
            "Concat",
            "Neg",
            "Exp",
            "Sqrt",
            "Pow",
            "MatMulNBits",  # com.microsoft int4 weights: the output has the activation's type
        ),
        0,
    ),
    "Where": 1,  # input 0 is the boolean condition
}
FUSED_FIRST_INPUT = {"Attention", "MultiHeadAttention", "GroupQueryAttention"}  # outputs take the query's type
MAX_STEPS = 64


def _declared(g: Graph, name: str) -> int:
    scope: Graph | None = g
    while scope is not None:
        p = scope.proto
        for v in (*p.value_info, *p.input, *p.output):
            if v.name == name and v.type.tensor_type.elem_type:
                return int(v.type.tensor_type.elem_type)
        if name in scope.initializers:
            return int(scope.initializers[name].data_type)
        if name in scope.producer:
            return 0  # produced here: the outer scopes' names are shadowed
        scope = scope.parent
    return 0


def elem_type(g: Graph, name: str, default: int = TensorProto.FLOAT) -> int:
    """The ONNX element type of ``name`` in ``g`` (declared, or followed up through its producers)."""
    for _ in range(MAX_STEPS):
        declared = _declared(g, name)
        if declared:
            return declared
        scope: Graph | None = g
        while scope is not None and name not in scope.producer:
            scope = scope.parent
        if scope is None:
            return default
        n = scope.nodes[scope.producer[name]]
        if n.op_type == "Cast":
            return int(_attr(n, "to", default))
        if n.op_type == "Constant":
            value = scope.const_value(name)
            return default if value is None else _np_type(value.dtype)
        if n.op_type in FUSED_FIRST_INPUT and n.input:
            g, name = scope, n.input[0]
            continue
        pos = SAME_AS_INPUT.get(n.op_type)
        if pos is None or len(n.input) <= pos or not n.input[pos]:
            return default
        g, name = scope, n.input[pos]
    return default


def _np_type(dtype) -> int:
    return int(helper.np_dtype_to_tensor_dtype(dtype))
