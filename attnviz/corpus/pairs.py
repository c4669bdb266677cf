"""Encoder-decoder corpora: the source text feeds the encoder, the pair column (the target) the decoder.

With ``--text-pair-column`` the decoder is teacher-forced exactly as ``attnviz open MODEL --text SRC --text-pair
TGT`` feeds it: the decoder start token, then the target's tokens (no end token: the model would predict it).
Without it the worker generates greedily, batch by batch, as ``attnviz open MODEL --text SRC --generate N`` does
(up to N new tokens, stopping at the end token), and the decoder then reads the start token and every generated
token but the last (the rows ``analyze`` shows).  Batches are right-padded on both sides; the encoder's padded
keys are masked by its mask input, and the decoder's padded rows and keys are never counted (a causal decoder
never sees them; a decoder mask input hides them too).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attnviz import AttnvizError
from attnviz.core import metadata as md
from attnviz.corpus.cut import Read
from attnviz.corpus.gold import GoldBatch, GoldPair
from attnviz.corpus.items import Item, item_error
from attnviz.corpus.plan import MAP_BUDGET_BYTES, BatchSpec
from attnviz.runtime.limits import SHORTEN, check_positions
from attnviz.runtime.truncation import decoder_rows, keep_single

FIX = SHORTEN + " (or drop the item)"


@dataclass
class PairSpec(BatchSpec):
    """A text batch (the encoder's arrays) plus the decoder's right-padded target rows."""

    dec_lengths: np.ndarray | None = None  # [B]
    dec_ids: np.ndarray | None = None  # [B, Td] int32
    dec_special: np.ndarray | None = None  # [B, Td] bool
    generate: int = 0  # no target given: the worker generates up to this many tokens (dec_* are None until then)
    gold: GoldBatch | None = None  # --gold-column: each item's gold alignment and word maps (corpus/gold.py)


@dataclass
class Encoded:
    src: list[list[int]]
    types: list[list[int]]
    src_special: list[list[bool]]
    dec: list[list[int]]
    dec_special: list[list[bool]]
    # words=True: the word (whitespace-separated, -1 for none) of each source piece / target piece after the start
    src_words: list[list[int]] | None = None
    dec_words: list[list[int]] | None = None
    # --max-tokens: Item.index -> what the model read of it (items cut only), and (sources cut, targets cut)
    cuts: dict[int, Read] = field(default_factory=dict)
    sides_cut: tuple[int, int] = (0, 0)


def decoder_start(model) -> int:
    sp = md.section(model.meta, "special")
    start = sp.get("decoder_start", sp.get("bos"))
    return int(start if start is not None else 0)  # as the runtime's prompt for a text pair


def end_token(model) -> int | None:
    eos = md.section(model.meta, "special").get("eos")
    return int(eos) if eos is not None else None


def encode_pairs(model, items: list[Item], words: bool = False, max_tokens: int | None = None) -> Encoded:
    """Token lists of every item; the decoder's are empty when no item has a target (greedy generation).
    ``words``: encode each side as its whitespace-separated words (as ``attnviz align``) and keep each piece's
    word, so that gold alignments (word indices) can address the maps.  ``max_tokens``: each source to its
    first N tokens (a final ``</s>`` kept last) and each decoder row sequence (the start token, then the target's
    tokens) to its first N, as ``attnviz open --text SRC --text-pair TGT --max-tokens N`` cuts them
    (runtime/truncation.py)."""
    src_tok, tgt_tok = model.tokenizers
    tgt_tok = tgt_tok or src_tok
    if src_tok is None or tgt_tok is None:
        raise AttnvizError(
            f"no tokenizer for {model.path.name}: put tokenizer.json beside the model or pass --tokenizer FILE"
        )
    start = decoder_start(model)
    out = Encoded([], [], [], [], [])
    if words:
        return _encode_words(model, out, src_tok, tgt_tok, start, items)
    from attnviz.runtime.inputs import tokens_kept  # (loaded with the model)

    n_src = n_tgt = 0
    for it in items:
        try:
            with tokens_kept(max_tokens):  # the tokens cap counts what is kept (runtime/inputs.py)
                enc = src_tok.encode_ids(it.text, None)
            ids, types = list(enc.ids), list(enc.type_ids or [0] * len(enc.ids))
            special = [bool(s) for s in enc.special]
            text_read = None
            if max_tokens is not None and len(ids) > max_tokens:
                keep = keep_single(np.array(special, bool), max_tokens)
                ids, types, special = ([x for x, k in zip(v, keep) if k] for v in (ids, types, special))
                text_read = src_tok.leading_text(str(it.text), sum(not s for s in special))
                n_src += 1
            check_positions(model, len(ids), fix=FIX)
        except AttnvizError as e:
            raise item_error(it, e) from None
        if ids:
            out.src.append(ids)
            out.types.append(types)
            out.src_special.append(special)
        else:  # as encode_items: one pad-id token keeps shapes valid
            out.src.append([0])
            out.types.append([0])
            out.src_special.append([True])
        pair_read = None
        if it.pair is None:
            out.dec.append([])
            out.dec_special.append([])
        else:
            try:
                with tokens_kept(max_tokens):
                    target = tgt_tok.encode_ids(it.pair, add_special=False).ids
                dec = decoder_rows([start], target, max_tokens)  # as open --text-pair --max-tokens cuts them
                if len(dec) < 1 + len(target):
                    pair_read = tgt_tok.leading_text(it.pair, len(dec) - 1)  # the start token is not the target's
                    n_tgt += 1
                check_positions(model, len(dec), fix=FIX)
            except AttnvizError as e:
                raise item_error(it, e, pair=True) from None
            out.dec.append(dec)
            out.dec_special.append([bool(tgt_tok.is_special(i)) for i in dec])
        if text_read is not None or pair_read is not None:
            out.cuts[it.index] = Read(
                str(it.text) if text_read is None else text_read, it.pair if pair_read is None else pair_read
            )
    out.sides_cut = (n_src, n_tgt)
    return out


def mostly_unknown_items(enc: Encoded, src_tok, tgt_tok) -> int | None:
    """How many items have a source, or a target, mostly of its tokenizer's unknown token (a corpus in the wrong
    language: runtime/unknown_tokens.py); None where neither tokenizer names an unknown token."""
    from attnviz.runtime.unknown_tokens import mostly_unknown

    unk_src, unk_tgt = getattr(src_tok, "unk_id", None), getattr(tgt_tok or src_tok, "unk_id", None)
    if unk_src is None and unk_tgt is None:
        return None
    n = 0
    for ids, special, dec, dec_special in zip(enc.src, enc.src_special, enc.dec, enc.dec_special):
        n += (unk_src is not None and mostly_unknown(unk_src, ids, special)) or (
            unk_tgt is not None and mostly_unknown(unk_tgt, dec, dec_special)
        )
    return n


def _encode_words(model, out: Encoded, src_tok, tgt_tok, start: int, items: list[Item]) -> Encoded:
    from attnviz.runtime.align import encode_words

    out.src_words, out.dec_words = [], []
    for it in items:
        assert it.text is not None and it.pair is not None  # --gold-column needs both (prestart.check)
        try:
            src = encode_words(src_tok, it.text.split(), special=True)
            check_positions(model, len(src.ids), fix=FIX)
        except AttnvizError as e:
            raise item_error(it, e) from None
        try:
            tgt = encode_words(tgt_tok, it.pair.split(), special=False)
            check_positions(model, len(tgt.ids) + 1, fix=FIX)  # after the decoder's start token
        except AttnvizError as e:
            raise item_error(it, e, pair=True) from None
        out.src.append(src.ids)
        out.types.append([0] * len(src.ids))
        out.src_special.append([w < 0 for w in src.word_ids])  # the tokenizer's own specials: no word
        out.src_words.append(src.word_ids)
        dec = [start, *tgt.ids]
        out.dec.append(dec)
        out.dec_special.append([bool(tgt_tok.is_special(i)) for i in dec])
        out.dec_words.append(tgt.word_ids)
    return out


def _pad(rows, dtype) -> np.ndarray:
    a = np.zeros((len(rows), max(len(r) for r in rows)), dtype)
    for r, v in enumerate(rows):
        a[r, : len(v)] = v
    return a


def plan_pairs(
    items: list[Item],
    enc: Encoded,
    batch_size: int,
    heads: int,
    generate: int = 0,
    budget: int = MAP_BUDGET_BYTES,
    gold: tuple[str, list[GoldPair]] | None = None,
) -> list[PairSpec]:
    """Batches sorted by (source length, target length, index); a batch ends before its maps (the largest of
    source² / target² / target × source per head, ``heads`` over all sites) would pass ``budget``.  Items
    without a target get ``generate`` (their decoder rows, at most 1 + generate, are made by the worker).
    ``gold``: (row convention, each item's :class:`GoldPair`), handed to each batch for its items."""
    order = sorted(range(len(items)), key=lambda i: (len(enc.src[i]), len(enc.dec[i]), i))
    out: list[PairSpec] = []
    cur: list[int] = []
    ts = td = 0
    for i in order:
        ns, nd = max(ts, len(enc.src[i])), max(td, len(enc.dec[i]) or 1 + generate)
        big = (len(cur) + 1) * heads * max(ns, nd) ** 2 * 4 > budget
        if cur and (len(cur) >= batch_size or big):
            out.append(_spec(len(out), cur, items, enc, gold))
            cur, ns, nd = [], len(enc.src[i]), len(enc.dec[i])
        cur.append(i)
        ts, td = ns, nd
    if cur:
        out.append(_spec(len(out), cur, items, enc, gold))
    if any(not d for d in enc.dec):
        if generate < 1:
            raise AttnvizError(
                "an encoder-decoder corpus needs targets (--text-pair-column C) or --generate N of 1 or more"
            )
        for spec in out:  # no targets: every batch generates (the decoder arrays come from the worker)
            spec.dec_lengths = spec.dec_ids = spec.dec_special = None
            spec.generate = generate
    return out


def _spec(
    bid: int, rows: list[int], items: list[Item], enc: Encoded, gold: tuple[str, list[GoldPair]] | None = None
) -> PairSpec:
    base = BatchSpec.from_lists(
        bid,
        [items[i].index for i in rows],
        [enc.src[i] for i in rows],
        [enc.types[i] for i in rows],
        [enc.src_special[i] for i in rows],
    )
    if not all(enc.dec[i] for i in rows):  # generated later, in the worker
        return PairSpec(base.batch_id, base.items, base.lengths, base.ids, base.type_ids, base.special)
    return PairSpec(
        base.batch_id,
        base.items,
        base.lengths,
        base.ids,
        base.type_ids,
        base.special,
        dec_lengths=np.array([len(enc.dec[i]) for i in rows], np.int64),
        dec_ids=_pad([enc.dec[i] for i in rows], np.int32),
        dec_special=_pad([enc.dec_special[i] for i in rows], bool),
        gold=GoldBatch(gold[0], tuple(gold[1][i] for i in rows)) if gold is not None else None,
    )


def set_decoder_rows(spec: PairSpec, rows: list[list[int]], tok) -> None:
    spec.dec_lengths = np.array([len(r) for r in rows], np.int64)
    spec.dec_ids = _pad(rows, np.int32)
    spec.dec_special = _pad([[bool(tok.is_special(i)) for i in r] for r in rows], bool)


def generate_rows(model, spec: PairSpec) -> list[list[int]]:
    """Greedy generation for the whole batch, one full re-run per step (as ``attnviz open --generate`` without a
    KV cache): returns each item's generated ids, up to ``spec.generate`` of them, the end token included."""
    start, eos = decoder_start(model), end_token(model)
    b = spec.size
    gen: list[list[int]] = [[] for _ in range(b)]
    done = np.zeros(b, bool)
    for _ in range(spec.generate):
        rows = [[start, *g] + [0] * (max(map(len, gen)) - len(g)) for g in gen]  # finished rows padded after
        spec.dec_ids = np.asarray(rows, np.int32)
        spec.dec_lengths = np.full(b, len(rows[0]), np.int64)
        logits = model.logits(pair_feeds(model, spec))
        last = logits[np.arange(b), [len(g) for g in gen]] if logits.ndim == 3 else logits  # each row's newest
        nxt = last.argmax(-1)
        for r in np.flatnonzero(~done):
            gen[r].append(int(nxt[r]))
            done[r] = eos is not None and gen[r][-1] == eos
        if done.all():
            break
    spec.dec_ids = spec.dec_lengths = None
    return gen


def pair_feeds(model, spec: PairSpec) -> dict[str, np.ndarray]:
    if spec.lengths is None or spec.ids is None or spec.type_ids is None or spec.dec_ids is None:
        raise AttnvizError("internal: a pair batch without token arrays")
    assert spec.dec_lengths is not None
    b, ts = spec.ids.shape
    td = spec.dec_ids.shape[1]
    by_role = {
        "tokens": spec.ids,
        "mask": np.arange(ts)[None, :] < spec.lengths[:, None],
        "token_types": spec.type_ids,
        "positions": np.broadcast_to(np.arange(ts), (b, ts)),
        "decoder_tokens": spec.dec_ids,
        "decoder_mask": np.arange(td)[None, :] < spec.dec_lengths[:, None],
    }
    feeds = {}
    for i in model.inputs:
        a = by_role[model.roles[i.name]]
        dt = np.dtype(i.dtype) if i.dtype in ("int64", "int32", "float32", "bool") else np.int64
        feeds[i.name] = np.ascontiguousarray(a.astype(dt))
    return feeds
