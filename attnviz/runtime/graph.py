"""Find the attention in an ONNX graph, label it, order it, and expose it as graph outputs.

Three families of sites (see shared/reference/onnx-attention-findings.md):

* decomposed: a ``Softmax`` whose output (through NaN guards, casts, dropout) is input A of the
  P·V ``MatMul`` and whose input (through scale / mask / bias ops) comes from a Q·Kᵀ ``MatMul``;
* the standard ONNX ``Attention`` op (opset 23+): switched to ``qk_matmul_output_mode=3``;
* onnxruntime ``com.microsoft`` fused ops: ``MultiHeadAttention`` / ``GroupQueryAttention`` expose
  their optional QK output, packed ``Attention`` is recomputed from its input and weights.

Everything here works on an in-memory copy; the user's file is never written.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from attnviz import AttnvizError
from attnviz.core.attention import SiteInfo

# ops a probability tensor may pass through between Softmax and the P·V MatMul
DOWN_PASS = {"Where", "Cast", "Dropout", "Identity", "Reshape"}
# ops between the Q·Kᵀ MatMul and the Softmax (scale, mask, bias, softcap)
UP_PASS = {"Add", "Mul", "Div", "Sub", "Where", "Cast", "Reshape", "Tanh", "Identity", "Max", "Min", "Clip"}
MATMULS = {"MatMul", "Einsum", "FusedMatMul"}
# elementwise ops an epilogue may contain for per-head recompute (shapes broadcast over heads)
ELEMENTWISE = {"Add", "Mul", "Div", "Sub", "Where", "Cast", "Tanh", "Identity", "Max", "Min", "Clip", "IsNaN", "Not", "Softmax", "Dropout"}
UNSUPPORTED_FUSED = {
    "PackedAttention": "packed (padding-free) attention",
    "PackedMultiHeadAttention": "packed multi-head attention",
    "SparseAttention": "sparse attention",
    "PagedAttention": "paged attention",
    "DecoderMaskedSelfAttention": "decoder-masked self-attention",
    "LongformerAttention": "Longformer attention",
    "QAttention": "quantized attention",
}
REEXPORT_HINT = (
    "re-export the model without onnxruntime's transformer optimizer (plain torch.onnx.export), "
    "or optimize with use_multi_head_attention=True"
)
MS = "com.microsoft"


@dataclass
class Site:
    """One attention site found in the graph (internal; SiteInfo is what leaves the runtime)."""

    node_index: int
    node_name: str
    method: str  # softmax | onnx-attention | mha-qk | gqa-qk | recompute-packed
    probs: str = ""  # tensor to expose (probabilities, or pre-softmax scores for *-qk)
    q: str = ""  # operand A of the QK MatMul (for stack/kind and on-demand recompute)
    k: str = ""  # operand B of the QK MatMul
    qk: str = ""  # output of the QK MatMul (start of the epilogue)
    epilogue: list[int] = field(default_factory=list)  # node indices from QK output to probs
    extra: dict = field(default_factory=dict)  # method-specific facts
    heads: int = 0
    stack: str = "encoder"
    kind: str = "self"
    layer: int = 0
    depth: int = 0
    scope: str = ""

    def info(self, heads: int | None = None) -> SiteInfo:
        return SiteInfo(self.stack, self.kind, self.layer, int(heads or self.heads), self.node_name, self.method)


class Graph:
    """Index of a GraphProto: producers, consumers, initializers."""

    def __init__(self, model: onnx.ModelProto, external_dir: str | None = None):
        self.model = model
        g = model.graph
        self.nodes = list(g.node)
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[tuple[int, int]]] = {}
        for i, n in enumerate(self.nodes):
            for o in n.output:
                if o:
                    self.producer[o] = i
            for j, t in enumerate(n.input):
                if t:
                    self.consumers.setdefault(t, []).append((i, j))
        self.initializers = {t.name: t for t in g.initializer}
        self.external_dir = external_dir
        self.inputs = [i for i in g.input if i.name not in self.initializers]
        self.input_names = [i.name for i in self.inputs]

    def const_value(self, name: str) -> np.ndarray | None:
        if name in self.initializers:
            # weights in external data files stay on disk until needed (base_dir is set by load_model)
            return numpy_helper.to_array(self.initializers[name], base_dir=self.external_dir or "")
        i = self.producer.get(name)
        if i is not None and self.nodes[i].op_type == "Constant":
            for a in self.nodes[i].attribute:
                if a.name == "value":
                    return numpy_helper.to_array(a.t)
        return None


# --------------------------------------------------------------------------- loading
def load_model(path: str | Path) -> tuple[onnx.ModelProto, str | None]:
    """Parse an ONNX file safely: clear one-line errors, external data confined to the model's folder.

    Returns the model and, when it has external data, the folder that data is relative to.  The weights
    are left on disk: onnxruntime reads them itself and the graph we instrument stays small (which is
    also how models over protobuf's 2 GB limit work).
    """
    # moved to runtime/loading.py (the checks for untrusted files live there); kept here for callers
    from attnviz.runtime.loading import load_model as load

    return load(path)


def _sniff(head: bytes) -> str:
    if head.startswith(b"PK"):
        return "zip (e.g. a PyTorch .pt or .npz)"
    if head.startswith(b"\x89PNG"):
        return "PNG image"
    return "text/JSON"


def _short(e: Exception) -> str:
    s = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return s[:160]


# --------------------------------------------------------------------------- finding
def _walk_down(g: Graph, t: str, limit: int = 6) -> str | None:
    """From a Softmax output, the tensor that a MatMul consumes as input A (the P·V product), or None."""
    frontier = [t]
    for _ in range(limit):
        nxt = []
        for cur in frontier:
            for ci, j in g.consumers.get(cur, []):
                c = g.nodes[ci]
                if c.op_type in MATMULS and j == 0:
                    return cur
                if c.op_type == "Einsum" and j in (0, 1):
                    return cur
                if c.op_type in DOWN_PASS and c.output and c.output[0]:
                    if c.op_type == "Where" and j == 0:
                        continue  # the condition, not data
                    nxt.append(c.output[0])
        if not nxt:
            return None
        frontier = nxt
    return None


def _walk_up(g: Graph, t: str, limit: int = 8) -> tuple[int, list[int]] | None:
    """From a Softmax input, the Q·Kᵀ MatMul producing it and the epilogue nodes in between."""
    best = None

    def rec(cur: str, path: list[int], depth: int):
        nonlocal best
        if depth > limit or best is not None:
            return
        pi = g.producer.get(cur)
        if pi is None:
            return
        p = g.nodes[pi]
        if p.op_type in MATMULS:
            # Q·Kᵀ has two activations (not a weight); a projection has an initializer operand
            if len(p.input) >= 2 and p.input[0] not in g.initializers and p.input[1] not in g.initializers:
                best = (pi, path)
            return
        if p.op_type not in UP_PASS:
            return
        for inp in p.input:
            if inp and inp not in g.initializers and g.const_value(inp) is None:
                rec(inp, path + [pi], depth + 1)

    rec(t, [], 0)
    return best


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def find_sites(g: Graph) -> tuple[list[Site], str | None]:
    """Return the attention sites (unordered, unlabelled) and, when there are none, why."""
    sites: list[Site] = []
    problems: list[str] = []
    softmax_seen = 0
    for i, n in enumerate(g.nodes):
        op, dom = n.op_type, n.domain
        name = n.name or f"{op}_{i}"
        if op == "Softmax" and dom in ("", "ai.onnx"):
            softmax_seen += 1
            probs = _walk_down(g, n.output[0])
            if probs is None:
                continue  # classifier head or other non-attention softmax
            up = _walk_up(g, n.input[0])
            if up is None:
                continue
            mi, path = up
            mm = g.nodes[mi]
            epi = sorted(path) + [i]
            # include the nodes between Softmax and the exposed tensor (NaN guard)
            cur = n.output[0]
            while cur != probs:
                nxt = None
                for ci, j in g.consumers.get(cur, []):
                    if g.nodes[ci].op_type in DOWN_PASS and not (g.nodes[ci].op_type == "Where" and j == 0):
                        nxt = ci
                        break
                if nxt is None:
                    break
                epi.append(nxt)
                # IsNaN feeding a Where guard belongs to the epilogue too
                for inp in g.nodes[nxt].input:
                    pi = g.producer.get(inp)
                    if pi is not None and g.nodes[pi].op_type == "IsNaN" and pi not in epi:
                        epi.append(pi)
                cur = g.nodes[nxt].output[0]
            sites.append(Site(i, name, "softmax", probs=probs, q=mm.input[0], k=mm.input[1], qk=mm.output[0], epilogue=sorted(set(epi))))
        elif op == "Attention" and dom in ("", "ai.onnx"):
            sites.append(Site(i, name, "onnx-attention", q=n.input[0], k=n.input[1],
                              heads=int(_attr(n, "q_num_heads", 0) or 0)))
        elif dom == MS and op == "MultiHeadAttention":
            k = n.input[1] if len(n.input) > 1 and n.input[1] else n.input[0]
            sites.append(Site(i, name, "mha-qk", q=n.input[0], k=k, heads=int(_attr(n, "num_heads", 0))))
        elif dom == MS and op == "GroupQueryAttention":
            k = n.input[1] if len(n.input) > 1 and n.input[1] else n.input[0]
            sites.append(Site(i, name, "gqa-qk", q=n.input[0], k=k, heads=int(_attr(n, "num_heads", 0))))
        elif dom == MS and op == "Attention":
            w = g.const_value(n.input[1]) if len(n.input) > 1 else None
            if w is None:
                problems.append(f"com.microsoft Attention node {name!r} has non-constant weights")
                continue
            sites.append(Site(i, name, "recompute-packed", q=n.input[0], k=n.input[0], heads=int(_attr(n, "num_heads", 0)),
                              extra={"unidirectional": int(_attr(n, "unidirectional", 0) or 0),
                                     "mask_filter_value": float(_attr(n, "mask_filter_value", -10000.0) or -10000.0),
                                     "scale": float(_attr(n, "scale", 0.0) or 0.0),
                                     "qkv_hidden_sizes": list(_attr(n, "qkv_hidden_sizes", []) or [])}))
        elif dom == MS and op in UNSUPPORTED_FUSED:
            problems.append(f"{op} ({UNSUPPORTED_FUSED[op]}) node {name!r} does not expose its probabilities")
    if sites:
        return sites, None
    if problems:
        return [], f"attention is fused into ops that hide the probabilities: {problems[0]}; {REEXPORT_HINT}"
    if softmax_seen:
        return [], (f"no attention found: the graph has {softmax_seen} Softmax node(s) but none feeds a P·V MatMul "
                    "from a Q·Kᵀ MatMul (e.g. only a classifier head); this model may not be a transformer")
    return [], "no attention found: the graph has no Softmax, ONNX Attention or onnxruntime attention op; this model may not be a transformer"


# --------------------------------------------------------------------------- labelling
_LAYER_RE = re.compile(r"(?:layers?|blocks?|block|h|layer)[._/](\d+)")
DECODER_INPUT_RE = re.compile(r"^decoder_|^labels$", re.I)
PAST_RE = re.compile(r"past|cache|present", re.I)


def node_scope(g: Graph, n) -> str:
    """The module path of a node: dynamo's name_scopes metadata, else the (legacy) node name."""
    for p in n.metadata_props:
        if p.key == "pkg.torch.onnx.name_scopes":
            return p.value
    return n.name or ""


def _ancestry(g: Graph) -> dict[str, int]:
    """Bit mask of graph inputs each tensor depends on (past/cache inputs ignored)."""
    bit = {name: 1 << i for i, name in enumerate(g.input_names) if not PAST_RE.search(name)}
    anc: dict[str, int] = dict(bit)
    for n in g.nodes:
        m = 0
        for t in n.input:
            m |= anc.get(t, 0)
        if n.op_type in ("Shape", "Size"):
            m = 0  # shapes carry no content; a mask built from another input's shape is not data flow
        for o in n.output:
            anc[o] = m
        # subgraphs (If/Loop) are treated as opaque
    return anc


def label_sites(g: Graph, sites: list[Site], meta: dict | None = None) -> list[Site]:
    """Assign stack / kind / layer and return the sites in canonical order."""
    meta = meta or {}
    anc = _ancestry(g)
    roles = meta.get("inputs") if isinstance(meta.get("inputs"), dict) else {}
    dec_bits = 0
    enc_bits = 0
    image_input = None
    for i, inp in enumerate(g.inputs):
        name = inp.name
        if PAST_RE.search(name):
            continue
        role = roles.get(name, "")
        if role in ("decoder_tokens", "decoder_mask") or DECODER_INPUT_RE.search(name):
            dec_bits |= 1 << g.input_names.index(name)
        else:
            enc_bits |= 1 << g.input_names.index(name)
        t = inp.type.tensor_type
        if role == "image" or (t.elem_type in (TensorProto.FLOAT, TensorProto.FLOAT16) and len(t.shape.dim) == 4):
            image_input = name
    # an image encoder + text decoder in one graph: token inputs are the decoder's
    if image_input is not None and not dec_bits:
        img_bit = 1 << g.input_names.index(image_input)
        others = enc_bits & ~img_bit
        if others:
            dec_bits, enc_bits = others, img_bit
    # a decoder graph fed with precomputed encoder states
    for name in g.input_names:
        if "encoder_hidden_states" in name or "encoder_output" in name:
            enc_bits |= 1 << g.input_names.index(name)

    # depth: attention sites on the longest data path (nodes are topologically sorted)
    site_at = {s.node_index: s for s in sites}
    depth: dict[str, int] = {}
    for i, n in enumerate(g.nodes):
        d = max((depth.get(t, 0) for t in n.input if t), default=0)
        s = site_at.get(i)
        if s is not None:
            s.depth = d
            d += 1
        for o in n.output:
            depth[o] = d

    for s in sites:
        node = g.nodes[s.node_index]
        s.scope = node_scope(g, node)
        aq, ak = anc.get(s.q, 0), anc.get(s.k, 0)
        s.kind = "cross" if (aq != ak and ak and not (ak & dec_bits) and (aq & dec_bits or aq & ~ak)) else "self"
        sc = s.scope.lower()
        if dec_bits and enc_bits:
            s.stack = "decoder" if (aq & dec_bits) else "encoder"
        elif "decoder" in sc:
            s.stack = "decoder"
        elif "encoder" in sc:
            s.stack = "encoder"
        elif s.kind == "cross":
            s.stack = "decoder"
        else:
            s.stack = ""  # decided below for single-stack graphs
    if any(s.stack == "" for s in sites):
        guess = "decoder" if _looks_causal(g, sites, meta) else "encoder"
        for s in sites:
            if s.stack == "":
                s.stack = guess
    # a cross site's stack is always the decoder, whatever the names said
    for s in sites:
        if s.kind == "cross":
            s.stack = "decoder"

    kind_order = {"self": 0, "cross": 1}
    stack_order = {"encoder": 0, "decoder": 1}
    out: list[Site] = []
    for stack in ("encoder", "decoder"):
        group = [s for s in sites if s.stack == stack]
        for kind in ("self", "cross"):
            ks = sorted((s for s in group if s.kind == kind), key=lambda s: (s.depth, s.node_index))
            for li, s in enumerate(ks):
                s.layer = li
        out += sorted(group, key=lambda s: (s.layer, kind_order[s.kind], s.node_index))
    out.sort(key=lambda s: (stack_order[s.stack], s.layer, kind_order[s.kind]))
    _cross_check_layers(out)
    return out


def _cross_check_layers(sites: list[Site]) -> None:
    """Names are only a hint: record where a parsed layer number disagrees with the data-path order."""
    for s in sites:
        m = _LAYER_RE.findall(s.scope)
        if m and int(m[-1]) != s.layer:
            s.extra["name_layer"] = int(m[-1])


def _looks_causal(g: Graph, sites: list[Site], meta: dict) -> bool:
    """Static guess whether a single-stack graph is a (causal) decoder; the runtime confirms on the maps."""
    cfg = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    arch = (cfg.get("model") or {}).get("arch") if isinstance(cfg.get("model"), dict) else None
    if arch == "decoder":  # attnviz's own exports say what they are
        return True
    if any(PAST_RE.search(n) for n in g.input_names):
        return True
    # a causal mask compares two position ranges (j > i): Greater/Less on Range-derived tensors
    from_range: set[str] = set()
    for n in g.nodes:
        if n.op_type == "Range" or (n.op_type in ("Unsqueeze", "Reshape", "Cast", "Expand", "Add", "Sub") and n.input and n.input[0] in from_range):
            from_range.update(o for o in n.output if o)
        if n.op_type in ("Greater", "Less", "GreaterOrEqual", "LessOrEqual") and len(n.input) == 2 \
                and n.input[0] in from_range and n.input[1] in from_range:
            return True
    for n in g.nodes:
        if n.op_type == "Trilu":
            return True
        if n.op_type == "Attention" and _attr(n, "is_causal", 0):
            return True
        if n.domain == MS and n.op_type in ("GroupQueryAttention",):
            return True
        if n.domain == MS and n.op_type == "Attention" and _attr(n, "unidirectional", 0):
            return True
    return False


# --------------------------------------------------------------------------- exposing
@dataclass
class Exposed:
    """What the instrumented model returns beyond its own outputs."""

    model: onnx.ModelProto
    outputs: list[str]  # per site: the tensor to fetch (dense mode) — probs, qk scores or packed X
    site_extra: list[dict]  # per site: extra fetched tensor names (mask_index for packed attention)


def _add_output(model: onnx.ModelProto, name: str, seen: set[str], elem_type: int | None = None) -> None:
    if name in seen:
        return
    seen.add(name)
    if elem_type:
        # outputs new to a node (ORT ops with several allowed types) need an explicit type; the rank is unknown
        vi = helper.make_tensor_value_info(name, elem_type, None)
    else:
        vi = helper.make_empty_tensor_value_info(name)  # existing tensors: onnxruntime infers the type
    model.graph.output.append(vi)


# fused ops whose 4th output carries the probabilities (or scores): attribute to set, output name prefix
FUSED_OUTPUT = {
    "onnx-attention": (("qk_matmul_output_mode", 3), "probs"),  # ONNX Attention: post-softmax probabilities
    "mha-qk": (None, "qk"),  # com.microsoft MultiHeadAttention: scaled QK + mask, softmax applied in numpy
    "gqa-qk": (("qk_output", 2), "qk"),  # com.microsoft GroupQueryAttention: 2 = after softmax
}


def instrumented_bytes(model: onnx.ModelProto, sites: list[Site], mode: str = "dense") -> tuple[bytes, Exposed]:
    """Serialize the model with the extra outputs, without keeping a second copy of its weights.

    The outputs and node changes are applied to ``model`` in place, serialized, and reverted
    (a deep copy would hold the weights twice: +90 MB for MiniLM, more for real models).
    """
    n_out = len(model.graph.output)
    touched = {s.node_index for s in sites if s.method in FUSED_OUTPUT}
    saved = {i: copy.deepcopy(model.graph.node[i]) for i in touched}
    try:
        exposed = instrument(model, sites, mode, in_place=True)
        data = model.SerializeToString()
    finally:
        del model.graph.output[n_out:]
        for i, n in saved.items():
            model.graph.node[i].CopyFrom(n)
    exposed.model = None
    return data, exposed


def instrument(model: onnx.ModelProto, sites: list[Site], mode: str = "dense", in_place: bool = False) -> Exposed:
    """Add graph outputs for every site (to a copy unless ``in_place``).

    dense: the probabilities (or what they are computed from for fused ops).
    ondemand: Q and K operands of the QK MatMul plus the epilogue's side inputs.
    """
    g0 = Graph(model)
    m = model if in_place else copy.deepcopy(model)
    nodes = m.graph.node
    seen = {o.name for o in m.graph.output}
    existing = set(seen)
    outs: list[str] = []
    extras: list[dict] = []
    for s in sites:
        n = nodes[s.node_index]
        ex: dict = {}
        if s.method in FUSED_OUTPUT:
            attr, prefix = FUSED_OUTPUT[s.method]
            if attr:
                _set_attr(n, *attr)
            while len(n.output) < 4:
                n.output.append("")
            if not n.output[3]:
                n.output[3] = f"attnviz_{prefix}_{s.node_index}"
            s.probs = n.output[3]
        elif s.method == "recompute-packed":
            s.probs = n.input[0]
            if len(n.input) > 3 and n.input[3]:
                ex["mask_index"] = n.input[3]
        if mode == "ondemand" and can_recompute(g0, s):
            ex["q"], ex["k"] = s.q, s.k
            for name in epilogue_side_inputs(g0, s):
                ex.setdefault("side", []).append(name)
            for name in [ex["q"], ex["k"], *ex.get("side", [])]:
                if name not in existing and name not in g0.initializers:
                    _add_output(m, name, seen)
        else:
            if s.probs not in existing:
                new = s.method in FUSED_OUTPUT
                _add_output(m, s.probs, seen, _float_type(model, n) if new else None)
        for name in ([ex["mask_index"]] if "mask_index" in ex else []):
            if name not in existing and g0.producer.get(name) is not None:
                _add_output(m, name, seen)
        outs.append(s.probs)
        extras.append(ex)
    return Exposed(m, outs, extras)


def _float_type(model: onnx.ModelProto, node) -> int:
    """The element type of a fused node's first input when declared (fp16 models), else float32."""
    for v in list(model.graph.value_info) + list(model.graph.input):
        if v.name == node.input[0] and v.type.tensor_type.elem_type:
            return v.type.tensor_type.elem_type
    return TensorProto.FLOAT


def _set_attr(node, name, value) -> None:
    for a in node.attribute:
        if a.name == name:
            node.attribute.remove(a)
            break
    node.attribute.append(helper.make_attribute(name, value))


def can_recompute(g: Graph, s: Site) -> bool:
    """Per-head recompute needs a plain Q·Kᵀ MatMul and an elementwise epilogue (no reshapes)."""
    if s.method != "softmax" or not s.qk or s.qk not in g.producer:
        return False
    if g.nodes[g.producer[s.qk]].op_type not in ("MatMul", "FusedMatMul"):
        return False
    return all(g.nodes[i].op_type in ELEMENTWISE for i in s.epilogue)


def epilogue_side_inputs(g: Graph, s: Site) -> list[str]:
    """Tensors the epilogue reads that it does not compute itself and that are not constants."""
    produced = {s.qk}
    for i in s.epilogue:
        produced.update(o for o in g.nodes[i].output if o)
    side = []
    for i in s.epilogue:
        for t in g.nodes[i].input:
            if t and t not in produced and t not in g.initializers and g.const_value(t) is None and t not in side:
                side.append(t)
    return side


def epilogue_model(g: Graph, s: Site, opset_imports, dtypes: dict[str, tuple]) -> onnx.ModelProto | None:
    """A small model computing probabilities from the QK scores and side inputs, for per-head recompute.

    Returns None when the epilogue contains shape-changing ops (Reshape), which break per-head slicing.
    """
    if any(g.nodes[i].op_type not in ELEMENTWISE for i in s.epilogue):
        return None
    side = epilogue_side_inputs(g, s)
    nodes = []
    inits = []
    needed_consts = set()
    for i in s.epilogue:
        nodes.append(copy.deepcopy(g.nodes[i]))
        for t in g.nodes[i].input:
            if t in g.initializers:
                needed_consts.add(t)
            elif t and g.const_value(t) is not None and t not in side:
                needed_consts.add(t)
    for t in needed_consts:
        arr = g.const_value(t)
        inits.append(numpy_helper.from_array(arr, name=t))
    # keep only the nodes on the path to probs (drop side branches that leave the epilogue)
    # dtypes: name -> (numpy dtype, rank) of the arrays that will be fed (side inputs are fed as rank 4)
    def vi(t):
        dt, rank = dtypes[t]
        return helper.make_tensor_value_info(t, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), [None] * rank)

    inputs = [vi(s.qk)] + [vi(t) for t in side]
    graph = helper.make_graph(nodes, "attnviz_epilogue", inputs, [helper.make_empty_tensor_value_info(s.probs)], initializer=inits)
    return helper.make_model(graph, opset_imports=list(opset_imports), ir_version=g.model.ir_version)


def static_heads(g: Graph, s: Site) -> int:
    """Heads from the graph when cheaply known (attributes / value_info); 0 if unknown."""
    if s.heads:
        return s.heads
    vi = {v.name: v for v in list(g.model.graph.value_info) + list(g.model.graph.output)}
    v = vi.get(s.probs) or vi.get(s.qk)
    if v is not None:
        dims = v.type.tensor_type.shape.dim
        if len(dims) == 4 and dims[1].HasField("dim_value"):
            return int(dims[1].dim_value)
    return 0
