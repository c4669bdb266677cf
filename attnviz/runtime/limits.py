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
        fix = fix or f"use --max-tokens {self.tokens} to truncate"
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
    """The smallest learned position table that a Gather reads, minus a constant index offset (BART adds 2)."""
    from onnx import numpy_helper

    g = proto.graph
    inits = {i.name: i for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    consts = {
        n.output[0]: numpy_helper.to_array(n.attribute[0].t)
        for n in g.node
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"
    }
    best: PositionLimit | None = None
    for n in g.node:
        if n.op_type != "Gather" or n.input[0] not in inits:
            continue
        name = n.input[0]
        dims = list(inits[name].dims)
        if len(dims) != 2 or not any(k in name.lower() for k in POSITION_NAMES):
            continue
        rows = int(dims[0])
        p = producer.get(n.input[1])
        if p is not None and p.op_type == "Add":
            found = [_scalar(x, inits, consts) for x in p.input]
            offs = [o for o in found if o is not None and 0 < o < rows]
            if offs:
                rows -= offs[0]
        if best is None or rows < best.tokens:
            best = PositionLimit(rows, f"position table {name}")
    return best


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
