"""Tokenise once, sort by length and cut padded batches; build a batch's feeds from its token lists.

A :class:`BatchSpec` is small and picklable (token ids, not arrays of maps): the driver plans, workers run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attnviz import AttnvizError
from attnviz.corpus.items import Item

# model kinds a corpus run handles: self-attention over one padded sequence (or fixed-size images), and
# encoder-decoder text models (source + teacher-forced target: corpus/pairs.py)
SUPPORTED_KINDS = ("encoder", "decoder", "vision", "encoder-decoder")
TEXT_ROLES = ("tokens", "mask", "token_types", "positions")
DECODER_ROLES = ("decoder_tokens", "decoder_mask")  # encoder-decoder models only


@dataclass
class BatchSpec:
    """Right-padded token arrays (compact: the driver holds every batch's spec for the whole run)."""

    batch_id: int
    items: list[int]  # Item.index of each row
    lengths: np.ndarray | None = None  # [B] real tokens per row
    ids: np.ndarray | None = None  # [B, T] int32, padded with 0
    type_ids: np.ndarray | None = None  # [B, T] int8
    special: np.ndarray | None = None  # [B, T] bool
    images: list[str] = field(default_factory=list)

    @classmethod
    def from_lists(cls, batch_id: int, items: list[int], ids, type_ids, special) -> BatchSpec:
        lengths = np.array([len(x) for x in ids], np.int64)
        b, t = len(ids), int(lengths.max())
        arrays: list[np.ndarray] = [np.zeros((b, t), np.int32), np.zeros((b, t), np.int8), np.zeros((b, t), bool)]
        for r, row in enumerate(zip(ids, type_ids, special)):
            for a, v in zip(arrays, row):
                a[r, : len(v)] = v
        return cls(batch_id, list(items), lengths, arrays[0], arrays[1], arrays[2])

    @property
    def size(self) -> int:
        return len(self.items)


def check_model(model) -> str:
    kind = model.kind
    if kind not in SUPPORTED_KINDS:
        raise AttnvizError(
            f"{model.path.name} is a {kind} model; corpus analysis handles encoder, decoder-only and "
            "encoder-decoder text models and image encoders for now"
        )
    roles = model.roles
    need = ("image",) if kind == "vision" else ("tokens",)
    known = set(TEXT_ROLES) | {"image"} | (set(DECODER_ROLES) if kind == "encoder-decoder" else set())
    for i in model.inputs:
        if roles[i.name] not in known:
            raise AttnvizError(
                f"input {i.name!r} ({roles[i.name]}) cannot be filled for a corpus run; export the model "
                "with token / mask / type / position inputs only (no KV cache)"
            )
    if not any(roles[i.name] in need for i in model.inputs):
        raise AttnvizError(
            f"{model.path.name} has no {need[0]} input; give {'--images DIR' if kind == 'vision' else '--texts FILE'} to a model that takes it"
        )
    return kind


def has_mask(model) -> bool:
    return any(model.roles[i.name] == "mask" for i in model.inputs)


def encode_items(model, items: list[Item]) -> tuple[list[list[int]], list[list[int]], list[list[bool]]]:
    src, tgt = model.tokenizers
    decoder = model.kind == "decoder"
    tok = (tgt or src) if decoder else src
    if tok is None:
        raise AttnvizError(
            f"no tokenizer for {model.path.name}: put tokenizer.json beside the model or pass --tokenizer FILE"
        )
    ids, types, special = [], [], []
    for it in items:
        # decoders see raw text (as in `attnviz open`); encoders get their [CLS]/[SEP] and the optional pair
        enc = tok.encode(it.text, None, add_special=False) if decoder else tok.encode(it.text, it.pair)
        if not enc.ids:
            enc_ids = [0]  # an item with no tokens still counts; one pad-id token keeps shapes valid
            ids.append(enc_ids)
            types.append([0])
            special.append([True])
            continue
        ids.append(enc.ids)
        types.append(enc.type_ids or [0] * len(enc.ids))
        special.append(enc.special)
    return ids, types, special


MAP_BUDGET_BYTES = 256 * 2**20  # all of one batch's maps at once; long items get smaller batches


def plan_text(
    items: list[Item],
    ids,
    types,
    special,
    batch_size: int,
    equal_lengths: bool,
    heads: int = 0,
    budget: int = MAP_BUDGET_BYTES,
) -> list[BatchSpec]:
    """Length-sorted batches (stable: ties keep file order).  ``equal_lengths`` (an encoder without a mask
    input, where padding would change every row) cuts a batch wherever the length changes.  A batch also
    ends before its maps (``heads`` in all layers × B × T² float32) would pass ``budget``, so peak memory
    depends on the longest item, not on the batch size or the corpus."""
    order = sorted(range(len(items)), key=lambda i: (len(ids[i]), i))
    batches: list[BatchSpec] = []
    cur: list[int] = []
    for i in order:
        t = len(ids[i])  # the longest so far: sorted ascending
        full = len(cur) >= batch_size or (heads and (len(cur) + 1) * heads * t * t * 4 > budget)
        if cur and (full or (equal_lengths and t != len(ids[cur[0]]))):
            batches.append(_spec(len(batches), cur, items, ids, types, special))
            cur = []
        cur.append(i)
    if cur:
        batches.append(_spec(len(batches), cur, items, ids, types, special))
    return batches


def _spec(bid, rows, items, ids, types, special) -> BatchSpec:
    return BatchSpec.from_lists(
        bid,
        [items[i].index for i in rows],
        [ids[i] for i in rows],
        [types[i] for i in rows],
        [special[i] for i in rows],
    )


def plan_images(items: list[Item], batch_size: int) -> list[BatchSpec]:
    return [
        BatchSpec(
            n,
            [it.index for it in items[s : s + batch_size]],
            images=[str(it.image) for it in items[s : s + batch_size]],  # read_images sets every item's image
        )
        for n, s in enumerate(range(0, len(items), batch_size))
    ]


def text_feeds(model, spec: BatchSpec) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Right-padded feeds; returns (feeds, lengths [B], key_special [B, T])."""
    lengths, ids, types, special = spec.lengths, spec.ids, spec.type_ids, spec.special  # padding id 0: in range, masked
    if lengths is None or ids is None or types is None or special is None:
        raise AttnvizError("internal: a text batch without token arrays")
    b, t = ids.shape
    mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.int64)
    by_role = {"tokens": ids, "mask": mask, "token_types": types, "positions": np.broadcast_to(np.arange(t), (b, t))}
    feeds = {}
    for i in model.inputs:
        a = by_role[model.roles[i.name]]
        feeds[i.name] = np.ascontiguousarray(
            a.astype(np.dtype(i.dtype) if i.dtype in ("int64", "int32", "float32", "bool") else np.int64)
        )
    return feeds, lengths, special


def image_feeds(model, spec: BatchSpec, image_spec) -> tuple[dict[str, np.ndarray], None, None]:
    from attnviz.runtime import inputs as ip

    img = next(i for i in model.inputs if model.roles[i.name] == "image")
    arrays = [ip.load_image(p, image_spec)[0] for p in spec.images]
    return {img.name: np.concatenate(arrays, 0)}, None, None
