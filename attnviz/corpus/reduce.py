"""Each batch's maps become a :class:`Partial` (per-head sums and top-k candidates); partials fold in batch order.

Folding sums in batch order makes the result independent of worker count, engine and resume point: the
same float64 additions happen in the same order whichever process produced each partial.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnviz import AttnvizError
from attnviz.core.cross_stats import cross_row_stats, diagonal_key
from attnviz.core.stats import ROW_STATS, row_stats
from attnviz.core.writes import atomic_path
from attnviz.corpus.pairs import PairSpec, decoder_start, generate_rows, pair_feeds, set_decoder_rows
from attnviz.corpus.plan import BatchSpec, image_feeds, text_feeds

S = len(ROW_STATS)


@dataclass(frozen=True)
class HeadGroup:
    """One attention site (self or cross): its place in the model and where its heads start in the flat head index."""

    site: int  # index into AttentionResult.maps
    stack: str
    kind: str
    layer: int
    heads: int
    offset: int


def layout(sites) -> list[HeadGroup]:
    out, off = [], 0
    for i, s in enumerate(sites):
        if s.kind not in ("self", "cross"):
            continue
        out.append(HeadGroup(i, s.stack, s.kind, s.layer, int(s.heads), off))
        off += int(s.heads)
    return out


@dataclass
class Partial:
    batch_id: int
    items: int
    tokens: int
    sums: np.ndarray  # [NH, S] float64: per-row statistic summed over the batch's counted rows
    counts: np.ndarray  # [NH, S] int64: counted rows
    top_value: np.ndarray  # [S, NH, kb] float64 per-item mean, highest first
    top_item: np.ndarray  # [S, NH, kb] int64 Item.index
    top_row: np.ndarray  # [S, NH, kb] query position that scored highest in that item
    top_col: np.ndarray  # [S, NH, kb] key position it looked at
    # encoder-decoder without targets: the generated tokens (labels, end token included) of the items named above
    generated: dict[int, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Axis:
    """One side of a batch (the source / encoder or the target / decoder): real lengths, special keys."""

    lengths: np.ndarray  # [B]
    special: np.ndarray  # [B, T] bool
    causal: bool = False


def _cols(
    stat: str, p: np.ndarray, rows: np.ndarray, real: np.ndarray, special: np.ndarray, diag: np.ndarray | None = None
) -> np.ndarray:
    """Key column that goes with each scoring row; p [B, H, Tq, Tk] for the chosen (b, h) pairs via rows [B, H].
    ``diag [B, Tq]``: the key of each query's diagonal (cross-attention's monotone one; None: the same position)."""
    fixed = {"prev": -1, "next": 1, "diag": 0}
    if stat in fixed:
        base = rows if diag is None else np.take_along_axis(diag, rows, 1)
        return base + fixed[stat]
    if stat == "first":
        return np.zeros_like(rows)
    b, h = np.meshgrid(np.arange(p.shape[0]), np.arange(p.shape[1]), indexing="ij")
    r = p[b, h, rows]  # [B, H, T]
    keep = real if stat not in ("special", "special_other") else (special & real)
    if stat == "special_other":
        keep = keep.copy()
        keep[:, 0] = False
    return np.where(keep[:, None, :], r, -1.0).argmax(-1)


def reduce_maps(
    maps: list[np.ndarray],
    groups: list[HeadGroup],
    axes: dict[str, Axis],
    items: list[int],
    k: int,
    batch_id: int,
) -> Partial:
    """``axes[stack]`` is the query side of that stack's sites; a cross site's keys are the encoder's."""
    nh = sum(g.heads for g in groups)
    b = len(items)
    kb = min(k, b)
    sums = np.zeros((nh, S))
    counts = np.zeros((nh, S), np.int64)
    tv = np.zeros((S, nh, kb))
    ti = np.zeros((S, nh, kb), np.int64)
    tr = np.zeros((S, nh, kb), np.int64)
    tc = np.zeros((S, nh, kb), np.int64)
    item_ids = np.asarray(items, np.int64)
    for g in groups:
        p = maps[g.site]
        q = axes[g.stack]
        key = axes["encoder"] if g.kind == "cross" else q
        tk = p.shape[-1]
        real = np.arange(tk)[None, :] < key.lengths[:, None]
        sp = np.asarray(key.special, bool)[:, :tk]
        if g.kind == "cross":
            values, valid = cross_row_stats(p, q.lengths, key.lengths, sp)
            diag = np.clip(diagonal_key(q.lengths, key.lengths, p.shape[-2]), 0, tk - 1)
        else:
            values, valid = row_stats(p, q.lengths, sp, q.causal)
            diag = None
        hs = slice(g.offset, g.offset + g.heads)
        for s, name in enumerate(ROW_STATS):
            v, ok = values[name], valid[name]
            n = ok.sum(1)  # [B]
            vm = np.where(ok[:, None, :], v, 0.0)
            sums[hs, s] = vm.sum((0, 2))
            counts[hs, s] = int(n.sum())
            with np.errstate(invalid="ignore", divide="ignore"):
                per_item = np.where(n[:, None] > 0, vm.sum(2) / np.maximum(n, 1)[:, None], -np.inf)  # [B, H]
            rows = np.where(ok[:, None, :], v, -np.inf).argmax(-1)  # [B, H]
            cols = _cols(name, p, rows, real, sp, diag)
            # highest per-item mean first; ties go to the earlier item (deterministic across engines)
            order = np.lexsort((np.broadcast_to(item_ids[:, None], per_item.shape), -per_item), axis=0)[:kb]  # [kb, H]
            hh = np.arange(g.heads)[None, :]
            tv[s, hs] = per_item[order, hh].T
            ti[s, hs] = item_ids[order].T
            tr[s, hs] = rows[order, hh].T
            tc[s, hs] = cols[order, hh].T
    tokens = sum(int(a.lengths.sum()) for a in axes.values())
    return Partial(batch_id, b, tokens, sums, counts, tv, ti, tr, tc)


class BatchReducer:
    """Holds one model (one onnxruntime session) and turns a :class:`BatchSpec` into a :class:`Partial`."""

    def __init__(
        self,
        model_path: str,
        provider: str = "cpu",
        tokenizer: str | None = None,
        threads: int | None = None,
        k: int = 5,
        groups: list[HeadGroup] | None = None,
    ):
        from attnviz.runtime import inputs as ip
        from attnviz.runtime import open_model

        self.model = open_model(model_path, provider=provider, tokenizer=tokenizer, threads=threads)
        self.model.probe()
        self.kind = self.model.kind
        self.k = k
        self.groups = groups if groups is not None else layout(self.model.sites)
        self.image_spec = None
        if self.kind == "vision":
            img = next(i for i in self.model.inputs if self.model.roles[i.name] == "image")
            self.image_spec = ip.image_spec(self.model.meta, img.shape)

    def feeds(self, spec: BatchSpec):
        return image_feeds(self.model, spec, self.image_spec) if spec.images else text_feeds(self.model, spec)

    def __call__(self, spec: BatchSpec) -> Partial:
        if isinstance(spec, PairSpec):
            return self._pair(spec)
        feeds, lengths, special = self.feeds(spec)
        r = self.model.run(feeds, mode="dense")  # maps are reduced here and dropped with the batch
        maps = [m.array() for m in r.maps]
        if lengths is None:  # images: every position is real; the leading non-patch tokens (CLS) are special
            from attnviz.runtime.model import grid_for

            t = maps[self.groups[0].site].shape[-1]
            lengths = np.full(spec.size, t, np.int64)
            grid = grid_for(self.model, t)
            special = np.broadcast_to(np.arange(t) < (grid.offset if grid else 1), (spec.size, t))
        stack = self.groups[0].stack  # one stack: encoder, decoder (causal) or a vision encoder
        axes = {stack: Axis(lengths, special, self.kind == "decoder")}
        return reduce_maps(maps, self.groups, axes, spec.items, self.k, spec.batch_id)

    def _pair(self, spec: PairSpec) -> Partial:
        """Encoder-decoder: encoder self sites over the source, decoder self (causal) and cross sites over the target."""
        gen: list[list[int]] = []
        tok = self.model.tokenizers[1] or self.model.tokenizers[0]
        if spec.dec_ids is None:  # no targets: generate, then read the rows `analyze` shows after --generate
            gen = generate_rows(self.model, spec)
            start = decoder_start(self.model)
            set_decoder_rows(spec, [[start, *g[:-1]] for g in gen], tok)
        r = self.model.run(pair_feeds(self.model, spec), mode="dense")
        maps = [m.array() for m in r.maps]
        assert spec.lengths is not None and spec.special is not None
        assert spec.dec_lengths is not None and spec.dec_special is not None
        axes = {
            "encoder": Axis(spec.lengths, spec.special),
            "decoder": Axis(spec.dec_lengths, spec.dec_special, causal=True),
        }
        part = reduce_maps(maps, self.groups, axes, spec.items, self.k, spec.batch_id)
        if gen:
            named = set(np.unique(part.top_item).tolist())
            part.generated = {int(i): [tok.label(t) for t in g] for i, g in zip(spec.items, gen) if int(i) in named}
        return part


def default_threads(workers: int) -> int:
    return max(1, (os.cpu_count() or 1) // max(1, workers))


class Accumulator:
    """Running totals; ``fold`` takes partials strictly in batch order."""

    def __init__(self, nh: int, k: int):
        self.k = k
        self.next_batch = 0
        self.items = 0
        self.tokens = 0
        self.sums = np.zeros((nh, S))
        self.counts = np.zeros((nh, S), np.int64)
        self.top_value = np.full((S, nh, k), -np.inf)
        self.top_item = np.full((S, nh, k), -1, np.int64)
        self.top_row = np.full((S, nh, k), -1, np.int64)
        self.top_col = np.full((S, nh, k), -1, np.int64)
        self.generated: dict[int, list[str]] = {}  # generated tokens of the items in the top lists

    def fold(self, p: Partial) -> None:
        if p.batch_id != self.next_batch:
            raise AttnvizError(f"internal: batch {p.batch_id} arrived while {self.next_batch} was expected")
        if p.sums.shape != self.sums.shape:
            raise AttnvizError(f"internal: a worker saw {p.sums.shape[0]} heads, the driver {self.sums.shape[0]}")
        v = np.concatenate([self.top_value, p.top_value], -1)
        i = np.concatenate([self.top_item, p.top_item], -1)
        big = np.iinfo(np.int64).max
        order = np.lexsort((np.where(i < 0, big, i), -v), axis=-1)[..., : self.k]

        def take(a):
            return np.take_along_axis(a, order, -1)

        top_item = take(i)
        named = set(np.unique(top_item).tolist())
        generated = {n: g for n, g in (self.generated | p.generated).items() if n in named}
        # the new state is built aside and swapped in by one dict update: a Ctrl-C (delivered between bytecodes)
        # then finds the batch either wholly folded or not at all, so the checkpoint never counts it twice
        self.__dict__.update(
            generated=generated,
            sums=self.sums + p.sums,
            counts=self.counts + p.counts,
            items=self.items + p.items,
            tokens=self.tokens + p.tokens,
            top_value=take(v),
            top_item=top_item,
            top_row=take(np.concatenate([self.top_row, p.top_row], -1)),
            top_col=take(np.concatenate([self.top_col, p.top_col], -1)),
            next_batch=self.next_batch + 1,
        )

    def means(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.counts > 0, self.sums / np.maximum(self.counts, 1), np.nan)

    # -- checkpoint ------------------------------------------------------------------
    FIELDS = ("sums", "counts", "top_value", "top_item", "top_row", "top_col")

    def save(self, path: Path, fingerprint: str) -> None:
        # atomic: an interrupt mid-write leaves the previous checkpoint intact
        with atomic_path(path) as tmp, open(tmp, "wb") as f:  # a file object: np.savez would append .npz to a bare name
            np.savez(
                f,
                fingerprint=np.array(fingerprint),
                next_batch=self.next_batch,
                items=self.items,
                tokens=self.tokens,
                generated=np.array(json.dumps(self.generated)),
                **{n: getattr(self, n) for n in self.FIELDS},
            )

    @classmethod
    def load(cls, path: Path, fingerprint: str, nh: int, k: int) -> Accumulator | None:
        if not path.exists():
            return None
        try:
            with np.load(path) as z:
                if str(z["fingerprint"]) != fingerprint:
                    return None
                acc = cls(nh, k)
                acc.next_batch, acc.items, acc.tokens = int(z["next_batch"]), int(z["items"]), int(z["tokens"])
                for n in cls.FIELDS:
                    setattr(acc, n, z[n])
                if "generated" in z.files:  # checkpoints from before generation have none
                    acc.generated = {int(i): g for i, g in json.loads(str(z["generated"])).items()}
        except Exception as e:  # truncated or not ours
            raise AttnvizError(f"{path}: unreadable checkpoint ({type(e).__name__}); delete it to start over") from None
        return acc
