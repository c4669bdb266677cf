"""Tokenise once, sort by length and cut padded batches; build a batch's feeds from its token lists.

A :class:`BatchSpec` is small and picklable (token ids, not arrays of maps): the driver plans, workers run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attnviz import AttnvizError
from attnviz.core.words import with_article
from attnviz.corpus.cut import Read, cut
from attnviz.corpus.items import Item, item_error
from attnviz.runtime.limits import check_positions
from attnviz.runtime.unknown_tokens import items_mostly_unknown

# model kinds a corpus run handles: self-attention over one padded sequence (or fixed-size images), and
# encoder-decoder text models (source + teacher-forced target: corpus/pairs.py)
SUPPORTED_KINDS = ("encoder", "decoder", "vision", "encoder-decoder")
TEXT_ROLES = ("tokens", "mask", "token_types", "positions")
DECODER_ROLES = ("decoder_tokens", "decoder_mask")  # encoder-decoder models only
# inputs a corpus cannot fill that mean the model is of another kind altogether: its own message (the generic
# "export with token inputs only" would send the owner of a forecasting model to re-export it for nothing)
OTHER_MODALITY = {
    "series": (
        "{model} takes a numeric series (input {input!r}), and corpus analysis takes text or image models; look at "
        "a series model with attnviz open, attnviz figure or attnviz extract --inputs FEEDS.npz"
    ),
}
UNFILLABLE = (
    "input {input!r} ({role}) cannot be filled for a corpus run; export the model with token / mask / type / "
    "position inputs only (no KV cache)"
)


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
        enc = Encoded.from_lists(ids, type_ids, special)
        return cls.from_encoded(batch_id, list(items), enc, np.arange(len(enc)))

    @classmethod
    def from_encoded(cls, batch_id: int, items: list[int], enc: Encoded, rows: np.ndarray) -> BatchSpec:
        """Rows ``rows`` of ``enc``, right-padded with zeros into [B, max length] arrays."""
        lengths = enc.lengths[rows]
        b, t = len(rows), int(lengths.max())
        # flat source index of every real cell, row by row: offset of the row + position in it
        real = np.arange(t)[None, :] < lengths[:, None]
        src = (enc.offsets[rows][:, None] + np.arange(t)[None, :])[real]
        arrays = []
        for flat, dtype in ((enc.ids, np.int32), (enc.type_ids, np.int8), (enc.special, bool)):
            a = np.zeros((b, t), dtype)
            a[real] = flat[src]
            arrays.append(a)
        return cls(batch_id, list(items), lengths.astype(np.int64), arrays[0], arrays[1], arrays[2])

    @property
    def size(self) -> int:
        return len(self.items)


def check_model(model) -> str:
    kind = model.kind
    if kind not in SUPPORTED_KINDS:
        raise AttnvizError(
            f"{model.path.name} is {with_article(kind)} model; corpus analysis handles encoder, decoder-only and "
            "encoder-decoder text models and image encoders for now"
        )
    roles = model.roles
    need = ("image",) if kind == "vision" else ("tokens",)
    known = set(TEXT_ROLES) | {"image"} | (set(DECODER_ROLES) if kind == "encoder-decoder" else set())
    for i in model.inputs:
        role = roles[i.name]
        if role not in known:
            message = OTHER_MODALITY.get(role, UNFILLABLE)
            raise AttnvizError(message.format(model=model.path.name, input=i.name, role=role))
    if not any(roles[i.name] in need for i in model.inputs):
        raise AttnvizError(
            f"{model.path.name} has no {need[0]} input; give {'--images DIR' if kind == 'vision' else '--texts FILE'} to a model that takes it"
        )
    return kind


def has_mask(model) -> bool:
    return any(model.roles[i.name] == "mask" for i in model.inputs)


@dataclass
class Encoded:
    """Every item's tokens in flat arrays, item ``i`` at ``offsets[i]:offsets[i + 1]``: about 6 bytes a token,
    where nested lists of Python ints cost ~40 (a 100k-item corpus held ~100 MB more in the driver)."""

    offsets: np.ndarray  # [N + 1] int64
    ids: np.ndarray  # int32
    type_ids: np.ndarray  # int8
    special: np.ndarray  # bool
    # --max-tokens: Item.index -> what the model read of it (the start of its text, and pair), items cut only
    cuts: dict[int, Read] = field(default_factory=dict)
    # the items mostly of the tokenizer's unknown token (runtime/unknown_tokens.py); None: it names none
    mostly_unknown: int | None = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @classmethod
    def from_lists(cls, ids, type_ids, special) -> Encoded:
        offsets = np.zeros(len(ids) + 1, np.int64)
        np.cumsum([len(x) for x in ids], out=offsets[1:])
        n = int(offsets[-1])
        return cls(
            offsets,
            np.fromiter((v for row in ids for v in row), np.int32, n),
            np.fromiter((v for row in type_ids for v in row), np.int8, n),
            np.fromiter((v for row in special for v in row), bool, n),
        )


def encode_items(model, items: list[Item], kind: str | None = None, max_tokens: int | None = None) -> Encoded:
    """``kind``: the model's kind as the items are to be read (default: ``model.kind``).  ``max_tokens``: each
    item cut to N tokens by :mod:`attnviz.corpus.cut` (one text as ``attnviz open --max-tokens``; a pair longest
    first)."""
    src, tgt = model.tokenizers
    decoder = (kind or model.kind) == "decoder"
    tok = (tgt or src) if decoder else src
    if tok is None:
        raise AttnvizError(
            f"no tokenizer for {model.path.name}: put tokenizer.json beside the model or pass --tokenizer FILE"
        )
    from attnviz.runtime.inputs import tokens_kept  # (loaded with the model: no import here on the light paths)

    with tokens_kept(max_tokens):  # the tokens cap counts what is kept of each item
        parts = [
            _encode_chunk(model, tok, decoder, items[s : s + ENCODE_CHUNK], max_tokens)
            for s in range(0, len(items), ENCODE_CHUNK)
        ]
    ids, special, types, counts = (
        np.concatenate([p[k] for p in parts]).astype(dt, copy=False) if parts else np.zeros(0, dt)
        for k, dt in enumerate((np.int32, bool, np.int8, np.int64))
    )
    offsets = np.zeros(len(items) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    unknown = None if getattr(tok, "unk_id", None) is None else sum(p[5] for p in parts)
    return Encoded(offsets, ids, types, special, {k: v for p in parts for k, v in p[4].items()}, unknown)


ENCODE_CHUNK = 4096  # items a tokenizer call encodes at once: its per-item objects stay small beside the flat arrays


def _encode_chunk(model, tok, decoder: bool, items: list[Item], max_tokens: int | None = None):
    """``(ids, special, type_ids, counts, cuts, mostly_unknown)`` of ``items``: one batched call (decoders see raw
    text, as in `attnviz open`; encoders get their [CLS]/[SEP] and the optional pair), cut to ``max_tokens``
    (``cuts``: see :class:`Encoded`; ``mostly_unknown``: the items mostly of the unknown token).  An item with no tokens still counts: one pad-id token keeps shapes valid.  Where the
    tokenizer fails, one by one, so that the error names the item; so does an item past the model's positions."""
    texts = [it.text for it in items]
    pairs = None if decoder else [it.pair for it in items]
    try:
        ids, special, types, counts = tok.encode_many(texts, pairs, add_special=not decoder)
    except AttnvizError:
        encs = []
        for it in items:  # one item at a time, as before: the error names the item
            try:
                enc = tok.encode_ids(it.text, None, add_special=False) if decoder else tok.encode_ids(it.text, it.pair)
            except AttnvizError as e:
                raise item_error(it, e) from None
            encs.append(enc)
        counts = np.array([len(e.ids) for e in encs], np.int64)
        ids = np.fromiter((v for e in encs for v in e.ids), np.int32)
        special = np.fromiter((v for e in encs for v in e.special), bool)
        types = np.fromiter((v for e in encs for v in (e.type_ids or [0] * len(e.ids))), np.int8)
    cuts: dict[int, Read] = {}
    if max_tokens is not None and len(counts) and int(counts.max()) > max_tokens:
        ids, special, types, counts, cuts = _cut(tok, decoder, items, ids, special, types, counts, max_tokens)
    # the longest item fails if any does: one check, not one an item; then the first that fails, named
    if len(counts) and _too_long(model, int(counts.max())):
        limit = model.position_limit
        fix = f"use --max-tokens {limit.tokens} to truncate every item to it, or shorten or drop this one"
        for it, c in zip(items, counts.tolist()):
            try:
                check_positions(model, c, fix=fix)
            except AttnvizError as e:
                raise item_error(it, e) from None
    # counted on the tokens the model reads, before an empty item's pad token (which may be the unknown's id)
    unk = getattr(tok, "unk_id", None)
    unknown = 0 if unk is None else items_mostly_unknown(unk, np.asarray(ids), np.asarray(special, bool), counts)
    empty = counts == 0
    if empty.any():
        at = np.cumsum(counts)[empty]  # where each empty item's one token goes (before the next item's)
        ids, special, types = np.insert(ids, at, 0), np.insert(special, at, True), np.insert(types, at, 0)
        counts = np.where(empty, 1, counts)
    return ids, special, types, counts, cuts, unknown


def _too_long(model, n: int) -> bool:
    limit = model.position_limit
    return limit is not None and n > limit.tokens


def _cut(tok, decoder: bool, items: list[Item], ids, special, types, counts, n: int):
    """Each item past ``n`` tokens cut by :func:`attnviz.corpus.cut.cut` (one text: its first ``n``, a final special
    token kept last; a pair: longest first), here over the flat arrays, and what the model read of each."""
    keep = np.ones(len(ids), bool)
    starts = np.cumsum(counts) - counts
    cuts: dict[int, Read] = {}
    for i in np.flatnonzero(counts > n).tolist():
        s, c, it = int(starts[i]), int(counts[i]), items[i]
        try:
            mask, cuts[it.index] = cut(tok, str(it.text), None if decoder else it.pair, special[s : s + c], n)
        except AttnvizError as e:
            raise item_error(it, e) from None
        keep[s : s + c] = mask
    return ids[keep], special[keep], types[keep], np.minimum(counts, n), cuts  # (either rule keeps exactly n)


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
    depends on the longest item, not on the batch size or the corpus.  ``ids`` is an :class:`Encoded`
    (``types`` and ``special`` then unused) or per-item lists."""
    enc = ids if isinstance(ids, Encoded) else Encoded.from_lists(ids, types, special)
    index = np.fromiter((it.index for it in items), np.int64, len(items))
    return plan_encoded(index, enc, batch_size, equal_lengths, heads, budget)


def plan_encoded(
    index: np.ndarray,
    enc: Encoded,
    batch_size: int,
    equal_lengths: bool,
    heads: int = 0,
    budget: int = MAP_BUDGET_BYTES,
) -> list[BatchSpec]:
    """:func:`plan_text` over flat tokens; ``index[i]`` is item ``i``'s Item.index."""
    lengths = enc.lengths
    order = np.lexsort((np.arange(len(enc)), lengths))  # by length, ties in file order
    batches: list[BatchSpec] = []
    start = 0
    for n, i in enumerate(order.tolist()):
        t = int(lengths[i])  # the longest so far: sorted ascending
        size = n - start
        full = size >= batch_size or (heads and (size + 1) * heads * t * t * 4 > budget)
        if size and (full or (equal_lengths and t != lengths[order[start]])):
            rows = order[start:n]
            batches.append(BatchSpec.from_encoded(len(batches), index[rows].tolist(), enc, rows))
            start = n
    if start < len(order):
        rows = order[start:]
        batches.append(BatchSpec.from_encoded(len(batches), index[rows].tolist(), enc, rows))
    return batches


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
