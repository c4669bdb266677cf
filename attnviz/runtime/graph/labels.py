"""Label the sites: stack (encoder / decoder), kind (self / cross) and layer, and put them in canonical order.

Layers follow the data path (attention sites on the longest path), not node names; names are only a hint.
"""

from __future__ import annotations

import re
from collections import ChainMap

from onnx import TensorProto

from attnviz.core import metadata as md
from attnviz.runtime.graph.base import Site
from attnviz.runtime.graph.index import MS, Graph, _attr
from attnviz.runtime.inputs import guess_role

_LAYER_RE = re.compile(r"(?:layers?|blocks?|block|h|layer)[._/](\d+)")
DECODER_INPUT_RE = re.compile(r"^decoder_|^labels$", re.I)
PAST_RE = re.compile(r"past|cache|present", re.I)


def node_scope(g: Graph, n) -> str:
    """The module path of a node: dynamo's name_scopes metadata, else the (legacy) node name."""
    for p in n.metadata_props:
        if p.key == "pkg.torch.onnx.name_scopes":
            return p.value
    return n.name or ""


ENCODER_PAST_RE = re.compile(r"encoder|cross", re.I)


def _flow(g: Graph, bits: dict[str, int], sites: list[Site]) -> dict[int, ChainMap]:
    """One pass over the graph and every body: for each tensor, the input bits it depends on; for each site,
    its depth (attention sites on the longest data path).  Returns the ancestry map of each scope (by id)."""
    site_at = {(id(s.g), s.node_index): s for s in sites}
    scopes: dict[int, ChainMap] = {}

    def run(sg: Graph, anc: ChainMap, dep: ChainMap) -> None:
        scopes[id(sg)] = anc
        bodies: dict[int, list[Graph]] = {b.path[-1][0]: [] for b in sg.bodies}
        for b in sg.bodies:
            bodies[b.path[-1][0]].append(b)
        for i in sg.order:
            n = sg.nodes[i]
            m = 0
            for t in n.input:
                m |= anc.get(t, 0)
            d = max((dep.get(t, 0) for t in n.input if t), default=0)
            if n.op_type in ("Shape", "Size"):
                m = 0  # shapes carry no content; a mask built from another input's shape is not data flow
            d_out = d
            for body in bodies.get(i, ()):
                banc, bdep = anc.new_child(), dep.new_child()
                for v in body.proto.input:  # iteration counters, loop-carried values, scanned slices
                    banc[v.name], bdep[v.name] = m, d
                run(body, banc, bdep)
                for v in body.proto.output:
                    m |= banc.get(v.name, 0)
                    d_out = max(d_out, bdep.get(v.name, d))
            s = site_at.get((id(sg), i))
            if s is not None:
                s.depth = d
                d_out = max(d_out, d + 1)
            for o in n.output:
                anc[o], dep[o] = m, d_out

    run(g, ChainMap(dict(bits)), ChainMap({}))
    return scopes


def label_sites(g: Graph, sites: list[Site], meta: dict | None = None, model_type: str = "") -> list[Site]:
    """Assign stack / kind / layer and return the sites in canonical order.

    kind: a site is cross-attention when its keys come from the encoder side (encoder inputs or states, or
    the encoder half of a KV cache: ``past_key_values.N.encoder.*``) and not from the decoder's own tokens or
    cache, while its queries do.  Layers are numbered per stack and kind (self L0, cross L0, self L1, ...).
    ``model_type``: the folder's config.json ``model_type`` (read by the caller through the sidecar guard), which
    tells a dual encoder's causal text tower from a decoder.
    """
    meta = meta or {}
    roles = md.section(meta, "inputs")
    names = g.input_names
    bit = {name: 1 << i for i, name in enumerate(names)}
    enc_past = {n for n in names if PAST_RE.search(n) and ENCODER_PAST_RE.search(n)}
    dec_past = {n for n in names if PAST_RE.search(n) and n not in enc_past}
    # a decoder graph fed with precomputed encoder states or an encoder cache (optimum decoder files)
    decoder_graph = bool(enc_past) or any("encoder_hidden_states" in n or "encoder_output" in n for n in names)
    dec_bits = 0
    enc_bits = 0
    image_input = None
    for inp in g.inputs:
        name = inp.name
        if name in dec_past:
            if decoder_graph:
                dec_bits |= bit[name]
            continue
        if name in enc_past or "encoder_hidden_states" in name or "encoder_output" in name:
            enc_bits |= bit[name]
            continue
        role = roles.get(name, "")
        if (
            role in ("decoder_tokens", "decoder_mask")
            or DECODER_INPUT_RE.search(name)
            or (decoder_graph and "encoder" not in name)
        ):
            dec_bits |= bit[name]
        else:
            enc_bits |= bit[name]
        t = inp.type.tensor_type
        if role == "image" or (t.elem_type in (TensorProto.FLOAT, TensorProto.FLOAT16) and len(t.shape.dim) == 4):
            image_input = name
    # an image encoder + text decoder in one graph: token inputs are the decoder's
    if image_input is not None and not dec_bits:
        img_bit = bit[image_input]
        others = enc_bits & ~img_bit
        if others:
            dec_bits, enc_bits = others, img_bit

    scopes = _flow(g, bit, sites)

    for s in sites:
        node = s.g.nodes[s.node_index]
        s.scope = node_scope(s.g, node)
        anc = scopes[id(s.g)]
        aq, ak = anc.get(s.q, 0), anc.get(s.k, 0)
        s.kind = "cross" if (aq != ak and ak and not (ak & dec_bits) and (aq & dec_bits or aq & ~ak)) else "self"
        if not aq and ak:
            # queries that depend on no input are learned probe queries over the keys (SigLIP's attention-pooling
            # head: one probe row over the patches); a site of its own kind, not one more layer of the stack
            s.kind = "pooling"
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
    towers = _dual_towers(g, sites, scopes, image_input, bit)
    if towers:  # two towers that never meet: both are encoders, whatever their masks (CLIP's text tower is causal)
        for s in sites:
            s.stack = "encoder"
            s.extra["tower"] = towers[id(s)]
            s.extra["encoder_why"] = "dual encoder: image and text towers that never attend to each other"
    elif (
        not (dec_bits and enc_bits)
        and not any(s.kind == "cross" for s in sites)
        and (why := _encoder_evidence(g, meta, model_type))
    ):
        # a single-stack graph that says why it is an encoder: neither its names nor a causal map make it a decoder
        for s in sites:
            s.stack = "encoder"
            s.extra["encoder_why"] = why
    elif any(s.stack == "" for s in sites):
        guess = "decoder" if _looks_causal(g, sites, meta) else "encoder"
        for s in sites:
            if s.stack == "":
                s.stack = guess
    # a cross site's stack is always the decoder, whatever the names said
    for s in sites:
        if s.kind == "cross":
            s.stack = "decoder"

    kind_order = {"self": 0, "cross": 1, "pooling": 2}
    stack_order = {"encoder": 0, "decoder": 1}

    tower_order = {None: 0, "image": 0, "text": 1}  # a dual encoder's image tower first

    def tower(s: Site) -> int:
        return tower_order[s.extra.get("tower")]

    out: list[Site] = []
    for stack in ("encoder", "decoder"):
        group = [s for s in sites if s.stack == stack]
        for tw in sorted({tower(s) for s in group}):  # each tower of a dual encoder numbers its layers from 0
            for kind in kind_order:
                ks = [s for s in group if s.kind == kind and tower(s) == tw]
                for li, s in enumerate(sorted(ks, key=lambda s: (s.depth, s.g.path, s.node_index))):
                    s.layer = li
        out += group
    # per stack and tower: layer by layer (self before cross), a pooling head after the layers it pools
    out.sort(
        key=lambda s: (stack_order[s.stack], tower(s), s.kind == "pooling", s.layer, kind_order[s.kind], s.node_index)
    )
    _cross_check_layers(out)
    return out


def _cross_check_layers(sites: list[Site]) -> None:
    """Names are only a hint: record where a parsed layer number disagrees with the data-path order."""
    for s in sites:
        m = _LAYER_RE.findall(s.scope)
        if m and int(m[-1]) != s.layer:
            s.extra["name_layer"] = int(m[-1])


# config.json model types of contrastive dual encoders and their towers (transformers' names): their text towers
# may mask causally (CLIP's does) and are still encoders: they make one pooled vector, they predict no next token
DUAL_ENCODER_MODEL_TYPES = frozenset(
    ("clip", "clip_text_model", "clip_vision_model", "siglip", "siglip_text_model", "siglip_vision_model")
    + ("siglip2", "siglip2_text_model", "siglip2_vision_model", "metaclip_2", "metaclip_2_text_model")
)


def _encoder_evidence(g: Graph, meta: dict, folder_type: str = "") -> str:
    """Why a single-stack graph is an encoder although its mask may be causal ('' when nothing says so).

    A causal mask alone does not make a decoder: CLIP's text tower masks causally and pools the hidden state at its
    end-of-text token, found by ``ArgMax`` over the token ids.  A language model's graph predicts every position
    and never takes an ArgMax of its own input ids (greedy choice happens outside the graph), so that ArgMax, or the
    model type of a dual encoder in the metadata or the folder's config.json, says encoder.  A decoder without
    past inputs (a plain GPT-2 export) has neither and stays a decoder."""
    config = md.section(meta, "config")
    model_type = str(config.get("model_type") or folder_type or "")
    if model_type in DUAL_ENCODER_MODEL_TYPES:
        return f"model type {model_type}: a dual encoder's tower"
    roles = md.section(meta, "inputs")
    derived = {  # the token ids (not a mask's or positions' ints: an ArgMax over a mask finds the last real token)
        i.name
        for i in g.inputs
        if i.type.tensor_type.elem_type in (TensorProto.INT64, TensorProto.INT32)
        and (roles.get(i.name) or guess_role(i.name, "int64", len(i.type.tensor_type.shape.dim))) == "tokens"
    }
    for n in (g.nodes[i] for i in g.order):  # top level, topologically: reshapes, casts, comparisons (ids == eos)
        if (
            n.op_type in ("Cast", "Equal", "Identity", "Reshape", "Flatten", "Squeeze")
            and n.input
            and n.input[0] in derived
        ):
            derived.update(o for o in n.output if o)
        if n.op_type == "ArgMax" and n.input and n.input[0] in derived:
            return "pooled at the end-of-text token (ArgMax over the token ids), as CLIP's text tower is"
    return ""


def _dual_towers(g: Graph, sites: list[Site], scopes: dict[int, ChainMap], image_input, bit) -> dict[int, str]:
    """A whole dual encoder (CLIPModel, SiglipModel): an image input and token inputs whose attention sites never
    mix them — every site sees the image or the tokens, never both, and no site is cross-attention.  Returns each
    site's tower ("image" or "text"), or {} for any other graph (a captioner's decoder attends to the
    image through cross-attention; a vision-language decoder's self-attention sees both)."""
    if image_input is None or not sites or any(s.kind == "cross" for s in sites):
        return {}
    img = bit[image_input]
    out: dict[int, str] = {}
    for s in sites:
        anc = scopes[id(s.g)]
        a = anc.get(s.q, 0) | anc.get(s.k, 0)
        if not a or (a & img and a & ~img):
            return {}
        out[id(s)] = "image" if a & img else "text"
    return out if len(set(out.values())) == 2 else {}


def _looks_causal(g: Graph, sites: list[Site], meta: dict) -> bool:
    """Static guess whether a single-stack graph is a (causal) decoder; the runtime confirms on the maps."""
    arch = md.section(md.section(meta, "config"), "model").get("arch")
    if arch == "decoder":  # attnviz's own exports say what they are
        return True
    if any(PAST_RE.search(n) for n in g.input_names):
        return True
    # a causal mask compares two position ranges (j > i): Greater/Less on Range-derived tensors
    from_range: set[str] = set()
    for n in (n for sg in g.walk() for n in sg.nodes):
        if n.op_type == "Range" or (
            n.op_type in ("Unsqueeze", "Reshape", "Cast", "Expand", "Add", "Sub")
            and n.input
            and n.input[0] in from_range
        ):
            from_range.update(o for o in n.output if o)
        if (
            n.op_type in ("Greater", "Less", "GreaterOrEqual", "LessOrEqual")
            and len(n.input) == 2
            and n.input[0] in from_range
            and n.input[1] in from_range
        ):
            return True
    for n in (n for sg in g.walk() for n in sg.nodes):
        if n.op_type == "Trilu":
            return True
        if n.op_type == "Attention" and _attr(n, "is_causal", 0):
            return True
        if n.domain == MS and n.op_type in ("GroupQueryAttention",):
            return True
        if n.domain == MS and n.op_type == "Attention" and _attr(n, "unidirectional", 0):
            return True
    return False
