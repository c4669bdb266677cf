"""The longest input a model can take: where its positions stop, read from the model itself.

Past that length onnxruntime fails with a Gather index error cut mid-sentence (learned position tables) or the
model silently runs on garbage; so the runtime checks the token count first and offers ``--max-tokens``.
A ``tokenizer.json``'s truncation length is NOT a model limit (it is how the model was trained: MiniLM's says
128, its positions reach 512), so it is never used here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnviz import AttnvizError
from attnviz.runtime.sidecar import sidecar_json

# initializer-name fragments of learned position tables (BERT/RoBERTa/BART/ViT-style, GPT-2's wpe, T5 has none)
POSITION_NAMES = ("position", "wpe", "pos_emb", "pos_embed", "embed_positions")
HF_UNLIMITED = 10**6  # transformers writes 1e30 as model_max_length when a tokenizer has no limit


@dataclass(frozen=True)
class PositionLimit:
    tokens: int
    source: str  # where the number came from, for the message

    def message(self, n: int, what: str = "tokens", fix: str | None = None) -> str:
        from attnviz.core.setting_words import fix as words

        fix = fix or words("truncate", n=self.tokens)
        return f"{n} {what}; this model's positions stop at {self.tokens} ({self.source}); {fix}"


class InputTooLong(AttnvizError):
    """The input has more tokens than the model has positions; ``limit`` says how many fit."""

    def __init__(self, n: int, limit: PositionLimit, what: str = "", fix: str | None = None):
        msg = limit.message(n, fix=fix)
        super().__init__(f"{what}: {msg}" if what else msg)
        self.n = n
        self.limit = limit


SHORTEN = "shorten it: the model cannot read past its positions"


def check_positions(model, n: int, what: str = "", fix: str | None = None) -> None:
    """The one position-limit check, at every entry that feeds tokens (extract/open --text and --text-pair, corpus
    items and targets, align sentences): ``n`` tokens past the model's positions are refused in one line naming
    ``what`` and ``fix`` (default: the ``--max-tokens`` flag), before onnxruntime fails mid-sentence.  ``model``:
    any :class:`~attnviz.runtime.protocol.AttnModel` (not annotated: protocol.py imports this module)."""
    limit = model.position_limit
    if limit is not None and n > limit.tokens:
        raise InputTooLong(n, limit, what, fix)


def _from_metadata(meta: dict) -> PositionLimit | None:
    v = meta.get("max_positions")
    try:
        if v is not None and int(v) > 0:
            return PositionLimit(int(v), "metadata")
    except (TypeError, ValueError):
        pass
    cfg: dict = meta["config"] if isinstance(meta.get("config"), dict) else {}
    model: dict = cfg["model"] if isinstance(cfg.get("model"), dict) else {}
    if isinstance(model.get("max_len"), int) and model.get("input_kind", "tokens") == "tokens":
        return PositionLimit(int(model["max_len"]), "training config max_len")
    return None


def _scalar(name: str, inits: dict, consts: dict) -> int | None:
    arr = consts.get(name)
    if arr is None and name in inits:
        from onnx import numpy_helper

        arr = numpy_helper.to_array(inits[name])
    if arr is not None and np.size(arr) == 1 and np.asarray(arr).dtype.kind in "iu":
        return int(np.asarray(arr).reshape(()))
    return None


def _from_graph(proto) -> PositionLimit | None:
    """The smallest learned position table that a Gather reads, minus a constant index offset (BART adds 2): any
    ``[P, D]`` table gathered at the positions of the input's length (:func:`_position_offset`: a hand-built
    model's ``pos_table``), or a table named as one (:data:`POSITION_NAMES`: where its positions come otherwise,
    e.g. a ``position_ids`` input)."""
    from onnx import numpy_helper

    g = proto.graph
    inits = {i.name: i for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    consts = {
        n.output[0]: numpy_helper.to_array(n.attribute[0].t)
        for n in g.node
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"
    }
    inputs = {i.name for i in g.input} - set(inits)  # (an old IR lists the initializers among the inputs too)
    best: PositionLimit | None = None
    for n in g.node:
        if n.op_type != "Gather" or n.input[0] not in inits:
            continue
        name = n.input[0]
        dims = list(inits[name].dims)
        if len(dims) != 2:
            continue
        rows = int(dims[0])
        offset = _position_offset(n, producer, inits, consts, inputs)
        if offset is None:  # not gathered at the input's positions: a table named as one (its offset added next)
            if not any(k in name.lower() for k in POSITION_NAMES):
                continue
            # read at fixed rows whatever the input (a ViT tower's patch positions: CLIP ViT-B/32's 50 beside its
            # text tower's 77): read whole every run, so its size limits no input's length
            if _from_length(n.input[1:2], producer, inputs, need_shape=False) and not _from_length(
                n.input[1:2], producer, inputs
            ):
                continue
            p = producer.get(n.input[1])
            found = [_scalar(x, inits, consts) for x in p.input] if p is not None and p.op_type == "Add" else []
            offset = next((o for o in found if o is not None and 0 < o < rows), 0)
        if 0 < offset < rows:
            rows -= offset
        if best is None or rows < best.tokens:
            best = PositionLimit(rows, f"position table {name}")
    return best


# what positions pass through between their Range and the Gather that reads the table, each keeping a position's
# value (an Add only of a constant offset: BART's + 2); anything else (T5's relative buckets: a Sub of two ranges,
# Abs, Log, Min) makes other numbers than positions, and the table gathered is not a position table
KEEPS_POSITIONS = ("Add", "Cast", "Expand", "Identity", "Reshape", "Slice", "Squeeze", "Tile", "Unsqueeze")
# what an input's length is read through: its values never reach the positions through these
LENGTH_OPS = ("Shape", "Size")


def _position_offset(gather, producer: dict, inits: dict, consts: dict, inputs: set[str]) -> int | None:
    """Where ``gather`` (axis 0) reads its table at the positions of an input's length, ``offset .. offset + T-1``:
    the offset (a constant Range start, constant Adds on the way: BART's 2); else None.  Its indices must be a
    Range (through :data:`KEEPS_POSITIONS`) whose bounds come from the inputs' shapes and never from their values.
    A vocabulary embedding is gathered at the token ids themselves (an input's values), a token-type table where
    the model was given none at zeros of the input's shape (no Range): neither is a position limit."""
    if any(a.name == "axis" and a.i != 0 for a in gather.attribute):
        return None
    offset = 0
    node = producer.get(gather.input[1])
    while node is not None and node.op_type != "Range":
        if node.op_type not in KEEPS_POSITIONS or not node.input:
            return None
        if node.op_type == "Add":  # one side the positions, the other a constant offset
            side = [x for x in node.input if _scalar(x, inits, consts) is None]
            offset += sum(v for x in node.input if (v := _scalar(x, inits, consts)) is not None)
        else:  # the positions first; a Slice's or an Expand's bounds not from an input's values
            side = node.input[:1] if _from_length(node.input[1:], producer, inputs, need_shape=False) else []
        if len(side) != 1:
            return None
        node = producer.get(side[0])
    if node is None or not _from_length(list(node.input), producer, inputs):
        return None
    return offset + (_scalar(node.input[0], inits, consts) or 0)  # a Range from a past length: its step's own


def _from_length(names, producer: dict, inputs: set[str], need_shape: bool = True) -> bool:
    """Whether the tensors ``names`` are computed from no input's values (initializers, constants and the inputs'
    shapes: a Shape or Size of them) and, with ``need_shape``, from some input's shape."""
    seen: set[str] = set()
    todo = [x for x in names if x]
    shaped = False
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in inputs:
            return False
        node = producer.get(t)
        if node is None:
            continue  # an initializer
        if node.op_type in LENGTH_OPS:
            shaped = True
            continue
        todo.extend(x for x in node.input if x)
    return shaped or not need_shape


def _from_tokenizer_config(model_file: Path) -> PositionLimit | None:
    # the model's folder (a Hub repo's above onnx/), never above; through the JSON guard
    v = sidecar_json(model_file, "tokenizer_config.json").get("model_max_length")
    if isinstance(v, (int, float)) and 0 < v < HF_UNLIMITED:
        return PositionLimit(int(v), "tokenizer_config.json model_max_length")
    return None


def find_position_limit(meta: dict, proto, model_file: Path) -> PositionLimit | None:
    """Metadata, then the graph's position table, then tokenizer_config.json; None when nothing says.
    (A model's ``position_limit`` property calls this once.)"""
    limit = _from_metadata(meta) or (_from_graph(proto) if proto is not None else None)
    return limit if limit is not None else _from_tokenizer_config(model_file)
