"""Several texts as one padded batch (a dual encoder's candidate texts), padded as the model's tokenizer pads them.

transformers pads a batch with the tokenizer's pad token (``tokenizer_config.json``'s ``pad_token``; the
``tokenizer.json``'s own padding section where it sets one, with its side and any fixed length), the attention
mask 0 on the padding.  attnviz pads the same way, so each row's maps and scores are the ones a user's own batched
call gives; where nothing names a pad token the model's special ``pad`` id (metadata, config.json) is used, and
failing all of them id 0, said in a note.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnviz.core import metadata as md
from attnviz.runtime.sidecar import sidecar_json

if TYPE_CHECKING:
    from attnviz.runtime.inputs import Encoded, TextEncoder
    from attnviz.runtime.protocol import AttnModel


# SigLIP pools its text tower at the last position, so padding changes its scores: transformers' zero-shot pipeline
# pads its texts to this many tokens (padding="max_length", max_length=64), as SigLIP was trained
SIGLIP_LENGTH = 64


@dataclass(frozen=True)
class Padding:
    pad_id: int
    left: bool = False  # padding before the tokens (the tokenizer's direction "left")
    length: int | None = None  # a fixed length the tokenizer pads to; None: the longest text's
    source: str = ""  # what named the pad id (said in a note where it is a guess)
    length_note: str = ""  # why the texts are padded to ``length`` where the tokenizer file does not say it


def _pad_token_id(tok: TextEncoder, value) -> int | None:
    """A tokenizer_config.json ``pad_token`` (a string or an added-token object) as an id."""
    if isinstance(value, dict):
        value = value.get("content")
    return tok.token_id(value) if isinstance(value, str) and value else None


def _int(v) -> int | None:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def padding_for(model: AttnModel, tok: TextEncoder) -> Padding:
    """How the model's tokenizer pads a batch, and to what length (:func:`_padding`, :func:`_family_length`)."""
    pad = _padding(model, tok)
    return pad if pad.length is not None else _family_length(model, pad)


def _family_length(model: AttnModel, pad: Padding) -> Padding:
    """A SigLIP (config.json model type) padded as transformers' zero-shot pipeline pads it: to 64 tokens, or its
    text tower's positions where fewer."""
    from dataclasses import replace

    from attnviz.runtime.dual_scores import folder_config, model_type

    t = model_type(model)
    if not t and any(s.kind == "pooling" for s in model.sites):  # SigLIP's attention-pooling head, no config to say
        why = (
            "the texts padded to the longest: with no config.json to say the model is a SigLIP, not to 64 tokens as "
            "transformers' zero-shot pipeline pads SigLIP (put the model's config.json beside it for its scores)"
        )
        return replace(pad, length_note=why)
    if "siglip" not in t:
        return pad
    nested = folder_config(model.path).get("text_config")
    positions = _int(nested.get("max_position_embeddings")) if isinstance(nested, dict) else None
    n = min(SIGLIP_LENGTH, positions or SIGLIP_LENGTH)
    why = (
        f"the texts padded to {n} tokens, as transformers' zero-shot pipeline pads SigLIP (it reads the last position)"
    )
    return replace(pad, length=n, length_note=why)


def _padding(model: AttnModel, tok: TextEncoder) -> Padding:
    """The pad id and side: the first that says of tokenizer.json, tokenizer_config.json, the model's special ids,
    config.json; else id 0."""
    own = tok.padding or {}
    left = str(own.get("direction", "right")).lower() == "left"
    length = _int(own.get("length"))
    if _int(own.get("pad_id")) is not None and own.get("pad_token"):
        return Padding(int(own["pad_id"]), left, length, "tokenizer.json padding")
    found = _pad_token_id(tok, sidecar_json(model.path, "tokenizer_config.json").get("pad_token"))
    if found is not None:
        return Padding(found, left, length, "tokenizer_config.json pad_token")
    special = _int(md.section(model.meta, "special").get("pad"))
    if special is not None:
        return Padding(special, left, length, "the model's special pad id")
    config = sidecar_json(model.path, "config.json")
    nested = config.get("text_config")
    for c in (nested if isinstance(nested, dict) else {}, config):
        if _int(c.get("pad_token_id")) is not None:
            return Padding(int(c["pad_token_id"]), left, length, "config.json pad_token_id")
    return Padding(0, left, length, "")


def pad_rows(encs: list[Encoded], pad: Padding) -> tuple[list[list[int]], list[list[int]]]:
    """Each text's ids padded to one length, and the attention mask (1: a token, 0: padding)."""
    n = max(max(len(e.ids) for e in encs), pad.length or 0)
    rows, masks = [], []
    for e in encs:
        fill = n - len(e.ids)
        ids, mask = list(e.ids), [1] * len(e.ids)
        rows.append([pad.pad_id] * fill + ids if pad.left else ids + [pad.pad_id] * fill)
        masks.append([0] * fill + mask if pad.left else mask + [0] * fill)
    return rows, masks
