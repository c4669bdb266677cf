"""How much memory a run will take, estimated from shapes before onnxruntime allocates anything.

An 8 kB model can Expand a scalar to ``[1, 1, 30000, 30000]`` (3.6 GB) or ask ``ConstantOfShape`` for 4 TB:
onnxruntime simply tries, and the machine swaps or the process dies.  Every session attnviz runs
(:func:`attnviz.runtime.host.make_session`, in the crash-isolation child and in-process alike: the CLI, the
window's worker, corpus workers) therefore checks each run here first: ONNX shape inference with the shapes
actually fed (``data_prop``: shapes computed from Shape/Concat/constants are followed) gives every intermediate
tensor's size, and a walk through the nodes in order, freeing each tensor after its last reader, gives the peak
of what is alive at once — the weights, the feeds, the fetched outputs kept to the end, and the intermediates.
Over :func:`attnviz.core.limits.memory_cap` the run is refused in one line (:func:`check_run`).

What shape inference cannot size (an op it does not know, a shape read from the data) counts as nothing, so the
estimate is a floor there; the child's shared onnxruntime arena is capped at the same number as a backstop.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

# the onnx-free half (estimates by shape, the check before a run) lives in runtime/memory_kept.py; its names stay
# importable from here, their first home
from attnviz.runtime.memory_kept import (  # noqa: F401
    _CACHE,
    BUCKET_MIN,
    Estimate,
    EstimateCache,
    PlanHead,
    _seen_key,
    check_run,
)
from attnviz.runtime.optcache import GraphKey

KEEP_ELEMENTS = 4096  # initializers up to this size keep their values: shapes are computed from such constants
LONG_AXIS = 1024  # a fed axis this long (tokens, frames) gets the symbolic pass (MemoryPlan._worth_symbolic)


def _itemsize(elem_type: int) -> int:
    try:
        return int(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).itemsize)
    except Exception:  # strings, unknown or future types: not sized
        return 0


def _dtype_name(elem_type: int) -> str:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:
        return "?"


def _numel(dims) -> int:
    return math.prod(int(d) for d in dims)


def plan_head(proto: onnx.ModelProto) -> PlanHead:
    """What :class:`MemoryPlan` knows of ``proto`` before any estimate (kept with a corpus worker's statistics
    session, whose next command's plan is then made without parsing it: memory_kept.KeptPlan): the weights' bytes
    (initializers and Constant nodes' tensors), per fed input and axis whether the model fixes its size, onnx's
    version."""
    g = proto.graph
    weights = sum(_numel(t.dims) * _itemsize(t.data_type) for t in g.initializer)
    for node in g.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                    weights += _numel(a.t.dims) * _itemsize(a.t.data_type)
    fixed = {  # per fed input and axis: does the model fix its size (then it is never rounded up)
        i.name: [d.HasField("dim_value") and d.dim_value > 0 for d in i.type.tensor_type.shape.dim] for i in g.input
    }
    return PlanHead(weights, fixed, onnx.__version__)


class MemoryPlan(EstimateCache):
    """A model's structure for estimates (no weight values kept): built once per session, asked once per run."""

    def __init__(self, model: bytes | str | onnx.ModelProto, keep: GraphKey | None = None):
        """``keep``: the model's :func:`attnviz.runtime.optcache.graph_key`: each estimate is kept on disk under it
        and read back by the next command's session of the same graph (5 estimates were ~0.09 s CPU of a corpus
        command: one shape inference and node walk per bucket and worker)."""
        if isinstance(model, onnx.ModelProto):
            proto = onnx.ModelProto()
            proto.CopyFrom(model)
        elif isinstance(model, (bytes, bytearray, memoryview)):
            proto = onnx.load_from_string(bytes(model))
        else:
            proto = onnx.load(str(model), load_external_data=False)
        super().__init__(plan_head(proto), keep)
        g = proto.graph
        small: list[onnx.TensorProto] = []
        big: list[onnx.TensorProto] = []
        for t in g.initializer:
            external = t.data_location == TensorProto.EXTERNAL
            (big if external or _numel(t.dims) > KEEP_ELEMENTS else small).append(t)
        # big weights become declared inputs: shape inference needs their shapes, not their bytes
        del g.initializer[:]
        g.initializer.extend(small)
        declared = {i.name for i in g.input}
        self.fed = [i.name for i in g.input]  # what a run feeds (weights declared as inputs below are not)
        for t in big:
            if t.name not in declared:
                g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        self.proto = proto
        self._symbolic: _Symbolic | None | bool = False  # built on the first estimate; None where it failed

    def outputs(self) -> list[str]:
        return [o.name for o in self.proto.graph.output]

    def _estimate(self, shapes: dict[str, tuple[tuple[int, ...], int]], keep: set[str], cap: int | None) -> Estimate:
        graph, sizes = self._inferred(shapes)
        for name, (shape, elem) in shapes.items():
            sizes[name] = (_numel(shape) * _itemsize(elem), tuple(shape), elem)
        peak = _peak(graph, sizes, keep, set(shapes))
        if self._worth_symbolic(graph, sizes, shapes, peak, cap):
            if self._symbolic is False:
                self._symbolic = _Symbolic.of(self.proto, self.fed)
            if isinstance(self._symbolic, _Symbolic):
                sizes = {**sizes, **self._symbolic.sizes(shapes)}
                peak = max(peak, _peak(self._symbolic.graph, sizes, keep, set(shapes)))
        largest = max(((n, s, e, b) for n, (b, s, e) in sizes.items()), key=lambda x: x[3], default=("", (), 0, 0))
        return Estimate(
            self.weights + peak, self.weights, (largest[0], largest[1], _dtype_name(largest[2]), largest[3])
        )

    def _worth_symbolic(self, graph: onnx.GraphProto, sizes: dict, shapes: dict, peak: int, cap: int | None) -> bool:
        """ONNX's inference (~20 ms) sizes constant shapes (what a hostile file uses) but loses most of a torch
        export's attention tensors; the symbolic pass (0.2-2 s once per session, sympy's import included)
        finds them.  What it could add grows with the input (quadratically for attention), so it runs only
        where that can matter: a long input, or an estimate already near the cap, with tensors left unsized."""
        if not set(self.fed) <= set(shapes):
            return False
        unsized = any(o and o not in sizes for n in graph.node for o in n.output)
        long = max((d for s, _ in shapes.values() for d in s), default=0) >= LONG_AXIS
        return unsized and (long or (cap is not None and (self.weights + peak) * 16 >= cap))

    def _inferred(self, shapes: dict[str, tuple[tuple[int, ...], int]]) -> tuple[onnx.GraphProto, dict]:
        """ONNX's own shape inference with the fed shapes: the fallback where the symbolic pass fails."""
        proto = onnx.ModelProto()
        proto.CopyFrom(self.proto)  # structure only: the big weights were dropped in __init__
        for i in proto.graph.input:
            if i.name in shapes:
                shape, elem = shapes[i.name]
                i.type.tensor_type.elem_type = elem
                i.type.tensor_type.ClearField("shape")
                for d in shape:
                    i.type.tensor_type.shape.dim.add().dim_value = int(d)
        try:
            inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=True)
        except Exception:  # a graph inference rejects: onnxruntime will say why when the session runs
            inferred = proto
        sizes: dict[str, tuple[int, tuple[int, ...], int]] = {}
        _collect_sizes(inferred.graph, sizes)
        return inferred.graph, sizes


def _ssi():
    """onnxruntime's ``tools/symbolic_shape_infer.py`` loaded by its path: importing it as
    ``onnxruntime.tools.symbolic_shape_infer`` runs ``onnxruntime/tools/__init__.py``, which imports torch when
    installed (5 s and hundreds of MB, in every process that runs a model)."""
    import importlib.util
    import sys

    name = "attnviz_symbolic_shape_infer"
    if name not in sys.modules:
        spec = importlib.util.find_spec("onnxruntime")
        assert spec is not None and spec.origin is not None
        path = Path(spec.origin).parent / "tools" / "symbolic_shape_infer.py"
        loader = importlib.util.spec_from_file_location(name, path)
        assert loader is not None and loader.loader is not None
        module = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


class _Symbolic:
    """Every tensor's shape as formulas of the fed dimensions, worked out once (onnxruntime's symbolic shape
    inference: it follows torch exports' Shape/Slice/Concat chains and knows com.microsoft ops, where ONNX's
    own inference loses most shapes), then evaluated per run in microseconds."""

    def __init__(self, graph: onnx.GraphProto, dims: dict[str, tuple[tuple, int]], axes: dict[str, list[str]]):
        self.graph = graph
        self.dims = dims  # tensor -> (per axis: an int or a compiled formula of the fed dims, element type)
        self.axes = axes  # fed input -> the symbol of each axis ("" where the model fixes it)

    @classmethod
    def of(cls, proto: onnx.ModelProto, fed: list[str]) -> _Symbolic | None:
        if not _followable(proto.graph):
            return None
        try:
            import sympy

            SymbolicShapeInference = _ssi().SymbolicShapeInference
        except Exception:
            return None
        work = onnx.ModelProto()
        work.CopyFrom(proto)
        axes: dict[str, list[str]] = {}
        for k, i in enumerate(work.graph.input):
            if i.name not in fed:
                continue
            names = []
            for a, d in enumerate(i.type.tensor_type.shape.dim):
                if d.HasField("dim_value") and d.dim_value > 0:
                    names.append("")
                    continue
                d.dim_param = f"fed{k}x{a}"  # one symbol per fed axis: what each run supplies
                names.append(d.dim_param)
            axes[i.name] = names
        try:
            out = SymbolicShapeInference.infer_shapes(work, auto_merge=True, guess_output_rank=False, verbose=0)
        except Exception:  # an op or a graph it cannot follow: ONNX's inference per run instead
            return None
        if out is None:
            return None
        symbols = {p for names in axes.values() for p in names if p}
        compiled: dict[str, object] = {}
        funcs = {"Max": max, "Min": min, "floor": math.floor, "ceiling": math.ceil, "Mod": lambda a, b: a % b}

        def formula(text: str):
            if text not in compiled:
                try:
                    expr = sympy.sympify(text)
                    free = sorted(str(x) for x in expr.free_symbols)
                    if not set(free) <= symbols:
                        raise ValueError(text)  # a size read from the data: unknown before the run
                    f = sympy.lambdify([sympy.Symbol(x) for x in free], expr, modules=[funcs, "math"])
                    compiled[text] = (f, free)
                except Exception:
                    compiled[text] = None
            return compiled[text]

        dims: dict[str, tuple[tuple, int]] = {}

        def collect(g: onnx.GraphProto) -> None:
            for v in list(g.value_info) + list(g.output):
                tt = v.type.tensor_type
                if not v.type.HasField("tensor_type") or not tt.HasField("shape"):
                    continue
                shape: list = []
                for d in tt.shape.dim:
                    if d.HasField("dim_value"):
                        shape.append(int(d.dim_value))
                    elif d.HasField("dim_param") and formula(d.dim_param) is not None:
                        shape.append(compiled[d.dim_param])
                    else:
                        break
                else:
                    dims[v.name] = (tuple(shape), tt.elem_type)
            for n in g.node:
                for sg in _subgraphs(n):
                    collect(sg)

        collect(out.graph)
        return cls(out.graph, dims, axes)

    def sizes(self, shapes: dict[str, tuple[tuple[int, ...], int]]) -> dict:
        values = {p: int(d) for name, ps in self.axes.items() for p, d in zip(ps, shapes[name][0]) if p}
        sizes: dict[str, tuple[int, tuple[int, ...], int]] = {}
        for name, (shape, elem) in self.dims.items():
            try:
                got = tuple(d if isinstance(d, int) else int(d[0](*(values[x] for x in d[1]))) for d in shape)
            except Exception:  # a formula that does not evaluate here (a division by a zero-size axis)
                continue
            if all(d >= 0 for d in got):
                sizes[name] = (_numel(got) * _itemsize(elem), got, elem)
        return sizes


def _followable(g: onnx.GraphProto) -> bool:
    """Whether onnxruntime's symbolic inference can size ``g``.  It sizes GatherND as if ``batch_dims`` were 0
    (onnxruntime 1.32), so every shape after a batched GatherND is wrong; on the corpus statistics graph
    (runtime/statgraph.py gathers each statistic's best rows that way) the pass failed after ~0.9 s CPU with
    sympy's import, once per corpus worker, on the batch that first got near the cap: the run's last and longest,
    alone on the command's tail.  Such a graph keeps ONNX's own inference, which is where that failure left it."""
    for n in g.node:
        if n.op_type == "GatherND" and any(a.name == "batch_dims" and a.i for a in n.attribute):
            return False
        if not all(_followable(sg) for sg in _subgraphs(n)):
            return False
    return True


def _collect_sizes(g: onnx.GraphProto, sizes: dict) -> None:
    for v in list(g.value_info) + list(g.output):
        tt = v.type.tensor_type
        if not tt.HasField("shape") or not all(d.HasField("dim_value") for d in tt.shape.dim):
            continue  # unknown: not counted (see the module's note)
        shape = tuple(int(d.dim_value) for d in tt.shape.dim)
        if any(d < 0 for d in shape):
            continue
        sizes[v.name] = (_numel(shape) * _itemsize(tt.elem_type), shape, tt.elem_type)


def _subgraphs(node: onnx.NodeProto):
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from a.graphs


def _reads(node: onnx.NodeProto) -> set[str]:
    """What a node reads, its subgraphs' outer-scope names included (they stay alive until it has run)."""
    names = {x for x in node.input if x}
    for sg in _subgraphs(node):
        for n in sg.node:
            names |= _reads(n)
    return names


def _peak(g: onnx.GraphProto, sizes: dict, keep: set[str], fed: set[str]) -> int:
    """The most bytes alive at once running ``g``'s nodes in their (topological) order; a subgraph's own peak
    counts while its node runs.  Fed tensors and ``keep`` stay to the end; weights are counted apart."""
    # each node's outputs, reads and subgraphs read off its protobuf once (every field access builds a wrapper:
    # reading them in both passes was ~1/3 of a MiniLM estimate, first22b)
    nodes = []
    last: dict[str, int] = {}
    for k, node in enumerate(g.node):
        subs = list(_subgraphs(node))
        r = {x for x in node.input if x}
        for sg in subs:
            for n in sg.node:
                r |= _reads(n)
        outs = list(node.output)
        nodes.append((outs, r, subs))
        for x in r:
            last[x] = k
    produced = {o for outs, _, _ in nodes for o in outs if o}
    alive = sum(sizes.get(x, (0,))[0] for x in fed)
    peak = alive
    for k, (outs, r, subs) in enumerate(nodes):
        inner = 0
        for sg in subs:
            sub: dict = dict(sizes)
            _collect_sizes(sg, sub)
            inner = max(inner, _peak(sg, sub, {o.name for o in sg.output}, set()))
        alive += sum(sizes.get(o, (0,))[0] for o in outs if o)
        peak = max(peak, alive + inner)
        for x in set(outs) | r:  # freed after their last reader (or at once when none reads them)
            if x in produced and x not in keep and x not in fed and last.get(x, k) <= k:
                alive -= sizes.get(x, (0,))[0]
    return peak
