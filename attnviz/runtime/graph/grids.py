"""Token grids: how an image encoder's tokens lie on the image, read from the graph's patch embedding."""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from attnviz.runtime.graph.index import Graph, _attr


@dataclass
class TokenGrid:
    """How an image encoder's tokens lie on the image, read from the graph: ``lead`` tokens before the patches
    (concatenated learned tokens: CLS, registers), then ``rows x cols`` patches in row-major order."""

    rows: int
    cols: int
    lead: int = 0


SPATIAL_OPS = {"Conv", "MaxPool", "AveragePool"}


def token_grid(g: Graph, image_input: str, hw: tuple[int, int], n_keys: int) -> TokenGrid | None:
    """The patch grid of the image input at size ``hw``: the spatial map [B, C, h, w] that a Reshape/Flatten
    turns into tokens after a Conv (patch embedding / CNN backbone), and the Concat that may add learned
    tokens in front.  None when the graph does not show it (nothing is guessed)."""
    shapes = _concrete_shapes(g, image_input, hw)
    if shapes is None:
        return None
    seen, frontier = {image_input}, [(image_input, False)]
    flat = None
    for _ in range(200):  # bounded breadth-first walk down from the image
        nxt = []
        for t, after_conv in frontier:
            for ci, _ in g.consumers.get(t, []):
                n = g.nodes[ci]
                conv = after_conv or n.op_type in SPATIAL_OPS
                if conv and n.op_type in ("Reshape", "Flatten") and len(shapes.get(n.input[0], ())) == 4:
                    flat = flat or (n, shapes[n.input[0]])
                for o in n.output:
                    if o and o not in seen:
                        seen.add(o)
                        nxt.append((o, conv))
        if flat or not nxt:
            break
        frontier = nxt
    if flat is None:
        return None
    node, (_, _, h, w) = flat
    if not isinstance(h, int) or not isinstance(w, int):
        return None
    lead = _lead_tokens(g, node.output[0], shapes)
    # tokens are the h x w cells, or the columns (a text-line strip: the Reshape folds the height into channels),
    # or the rows; learned tokens come first.  Anything else does not fit: no grid rather than a guessed one.
    for rows, cols in ((h, w), (1, w), (h, 1)):
        if lead is None and 0 < n_keys - rows * cols <= 16:
            return TokenGrid(rows, cols, n_keys - rows * cols)  # a Concat in front whose sizes are computed at run time
        if lead is not None and rows * cols + lead == n_keys:
            return TokenGrid(rows, cols, lead)
    return None


def _concrete_shapes(g: Graph, image_input: str, hw: tuple[int, int]) -> dict[str, tuple[int | None, ...]] | None:
    """Shape inference on a weight-free copy with the image input fixed to [1, C, H, W]; dims as ints or None."""
    m = onnx.ModelProto()
    m.CopyFrom(g.model)
    for v in m.graph.input:
        if v.name == image_input:
            dims = v.type.tensor_type.shape.dim
            if len(dims) != 4:
                return None
            c = dims[1].dim_value if dims[1].HasField("dim_value") else 3
            v.type.tensor_type.shape.CopyFrom(
                onnx.TensorShapeProto(dim=[onnx.TensorShapeProto.Dimension(dim_value=d) for d in (1, c, hw[0], hw[1])])
            )
    try:
        inferred = onnx.shape_inference.infer_shapes(m, data_prop=True)
    except Exception:
        return None
    out: dict[str, tuple[int | None, ...]] = {t.name: tuple(int(d) for d in t.dims) for t in inferred.graph.initializer}
    for v in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        t = v.type.tensor_type
        if t.HasField("shape"):
            out[v.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
    return out


def _concat_after(g: Graph, t: str, limit: int = 6):
    """The first Concat downstream of the flattened patches (through layout ops), and the operand it reads."""
    frontier, seen = [t], {t}
    for _ in range(limit):
        nxt = []
        for cur in frontier:
            for ci, j in g.consumers.get(cur, []):
                n = g.nodes[ci]
                if n.op_type == "Concat":
                    return n, j
                if (
                    n.op_type
                    in (
                        "Transpose",
                        "Reshape",
                        "Flatten",
                        "Squeeze",
                        "Unsqueeze",
                        "Identity",
                        "Cast",
                        "Add",
                        "MatMul",
                        "LayerNormalization",
                    )
                    and n.output[0] not in seen
                ):
                    seen.add(n.output[0])
                    nxt.append(n.output[0])
        frontier = nxt
    return None


def _lead_tokens(g: Graph, t: str, shapes: dict) -> int | None:
    """Tokens a Concat puts before the patches along the token axis: 0 when there is no such Concat (or the
    patches come first), None when something is put in front but its size is only known at run time."""
    found = _concat_after(g, t)
    if found is None:
        return 0
    node, j = found
    axis = int(_attr(node, "axis", 1))
    lead = 0
    for inp in node.input[:j]:
        shp = shapes.get(inp)
        if not shp or len(shp) <= axis or not isinstance(shp[axis], int):
            return None
        lead += shp[axis]
    return lead
