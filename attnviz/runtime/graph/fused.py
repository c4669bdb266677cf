"""Fused attention ops: the standard ONNX ``Attention`` (opset 23+) and onnxruntime's ``com.microsoft`` ops.

ONNX ``Attention`` and ``MultiHeadAttention`` / ``GroupQueryAttention`` can hand out their probabilities or QK
scores as an optional output; packed ``Attention`` is recomputed from its input and (constant) weights; the
other fused ops hide the probabilities and are reported as the reason nothing was found.
"""

from __future__ import annotations

from attnviz.runtime.graph.base import Finder, Scan, Site
from attnviz.runtime.graph.index import MS, Graph, _attr

UNSUPPORTED_FUSED = {
    "PackedAttention": "packed (padding-free) attention",
    "PackedMultiHeadAttention": "packed multi-head attention",
    "SparseAttention": "sparse attention",
    "PagedAttention": "paged attention",
    "DecoderMaskedSelfAttention": "decoder-masked self-attention",
    "LongformerAttention": "Longformer attention",
    "QAttention": "quantized attention",
}
# com.microsoft fused ops that can hand out their QK scores or probabilities (see FUSED_OUTPUT): op -> method
MS_QK_METHODS = {"MultiHeadAttention": "mha-qk", "GroupQueryAttention": "gqa-qk"}


def find_onnx_attention(g: Graph, i: int, name: str, loop: str, scan: Scan) -> None:
    n = g.nodes[i]
    scan.sites.append(
        Site(
            i,
            name,
            "onnx-attention",
            q=n.input[0],
            k=n.input[1],
            heads=int(_attr(n, "q_num_heads", 0) or 0),
            g=g,
            loop=loop,
        )
    )


def find_ms_qk(g: Graph, i: int, name: str, loop: str, scan: Scan) -> None:
    n = g.nodes[i]
    k = n.input[1] if len(n.input) > 1 and n.input[1] else n.input[0]  # packed QKV: one input
    method = MS_QK_METHODS[n.op_type]
    scan.sites.append(Site(i, name, method, q=n.input[0], k=k, heads=int(_attr(n, "num_heads", 0)), g=g, loop=loop))


def find_ms_packed(g: Graph, i: int, name: str, loop: str, scan: Scan) -> None:
    n = g.nodes[i]
    # its maps are recomputed from the input, weights and bias: the weights and any bias must be constants
    w = g.const_value(n.input[1]) if len(n.input) > 1 else None
    bias_given = len(n.input) > 2 and bool(n.input[2])
    if w is None or (bias_given and g.const_value(n.input[2]) is None) or g.parent is not None:
        scan.problems.append(
            f"com.microsoft Attention node {name!r} has non-constant weights or bias, or sits in a subgraph"
        )
        return
    scan.sites.append(
        Site(
            i,
            name,
            "recompute-packed",
            q=n.input[0],
            k=n.input[0],
            heads=int(_attr(n, "num_heads", 0)),
            g=g,
            extra={
                "unidirectional": int(_attr(n, "unidirectional", 0) or 0),
                "mask_filter_value": float(_attr(n, "mask_filter_value", -10000.0) or -10000.0),
                "scale": float(_attr(n, "scale", 0.0) or 0.0),
                "qkv_hidden_sizes": list(_attr(n, "qkv_hidden_sizes", []) or []),
            },
        )
    )


def refuse_hidden(g: Graph, i: int, name: str, loop: str, scan: Scan) -> None:
    op = g.nodes[i].op_type
    scan.problems.append(f"{op} ({UNSUPPORTED_FUSED[op]}) node {name!r} does not expose its probabilities")


# how each method gets its maps, for ``inspect``'s legend (a fused op's maps are the op's, or recomputed)
METHOD_NOTES = {
    "onnx-attention": "ONNX Attention's own probabilities (its 4th output, qk_matmul_output_mode=3)",
    "mha-qk": "MultiHeadAttention's scaled, masked QK scores (its output qk), softmax taken by attnviz",
    "gqa-qk": "GroupQueryAttention's own probabilities (its output_qk, qk_output=2)",
    "recompute-packed": "recomputed from the com.microsoft Attention node's input, weights and bias",
}

FINDERS: dict[tuple[str, str], Finder] = {
    ("", "Attention"): find_onnx_attention,
    **{(MS, op): find_ms_qk for op in MS_QK_METHODS},
    (MS, "Attention"): find_ms_packed,
    **{(MS, op): refuse_hidden for op in UNSUPPORTED_FUSED},
}
