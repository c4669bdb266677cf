"""``attnviz compare A B --texts FILE``, the worker side: both models run on each padded batch and their maps are
reduced there (:func:`attnviz.core.compare.batch_head_sums`) into a :class:`ComparePartial` — per item and head
sums, never a map — which the driver folds in batch order (:class:`CompareAccumulator`, checkpointed).

Folding in batch order makes the result independent of the engine, the worker count and the resume point: the same
float64 additions happen in the same order whichever process reduced each batch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnviz import AttnvizError
from attnviz.core.compare import batch_head_sums, is_logits, log_softmax
from attnviz.core.untrusted import checkpoint_problem, open_regular
from attnviz.core.writes import atomic_path
from attnviz.corpus.pairs import PairSpec, pair_feeds
from attnviz.corpus.plan import BatchSpec, text_feeds


@dataclass(frozen=True)
class Matched:
    """A site both models have (same stack, kind, layer and tower) with as many heads: ``a`` and ``b`` index each
    model's maps; ``offset`` is where its heads start in the flat head index."""

    a: int
    b: int
    stack: str  # as heads.parquet names it ("encoder", or "encoder (text)" for a dual encoder's tower)
    query: str  # the stack whose lengths count its real query rows ("encoder" / "decoder")
    kind: str
    layer: int
    heads: int
    offset: int


@dataclass(frozen=True)
class CompareSetup:
    """What a worker needs (picklable).  ``reducer()`` / ``workers`` / ``threads`` / ``gpu`` / ``ray_address`` are
    also what :func:`attnviz.corpus.ray_engine.run_specs` asks of a setup."""

    a: str
    b: str
    provider: str
    tokenizer: str | None
    threads: int
    workers: int
    matched: tuple[Matched, ...]
    outputs: tuple[str, ...]  # outputs both models have, compared per batch
    ray_address: str | None = None
    gpu: bool = False

    @property
    def sessions(self) -> tuple:
        """What the two sessions depend on: a worker warmed with these serves any setup with the same."""
        return (self.a, self.b, self.provider, self.tokenizer, self.threads)

    @property
    def heads(self) -> int:
        return sum(m.heads for m in self.matched)

    def reducer(self) -> PairReducer:
        return PairReducer(self)


@dataclass
class CompareTask:
    """One batch: A's spec, and B's where B's token ids differ (same tokens, other vocabulary numbers)."""

    batch_id: int
    a: BatchSpec
    b: BatchSpec | None = None

    @property
    def size(self) -> int:
        return self.a.size


@dataclass
class ComparePartial:
    """One batch's sums, per item (rows) and compared head (columns)."""

    batch_id: int
    items: np.ndarray  # [B] Item.index
    tokens: np.ndarray  # [B] real tokens (source + target for a pair)
    js_sum: np.ndarray  # [B, NH] float64: JS divergence (bits) summed over the item's real query rows
    agree: np.ndarray  # [B, NH] int64: rows whose most-attended key agrees
    max_abs_diff: np.ndarray  # [B, NH] float64
    rows: np.ndarray  # [B, NH] int64: real query rows
    out_max: np.ndarray  # [B, NO] float64: largest |Δ| of each output over the item (NaN: shapes differ)
    out_kl_sum: np.ndarray  # [B, NO] float64: KL(A ‖ B) of a logits output, bits, summed over the item's rows
    out_kl_rows: np.ndarray  # [B, NO] int64: rows of that sum (0: not logits)


class PairReducer:
    """Both models (one onnxruntime session each) in one worker; a :class:`CompareTask` in, a partial out."""

    def __init__(self, setup: CompareSetup):
        from attnviz.runtime import open_model

        self.setup = setup
        self.models = []
        for path in (setup.a, setup.b):
            m = open_model(path, provider=setup.provider, tokenizer=setup.tokenizer, threads=setup.threads)
            m.probe()
            self.models.append(m)

    def _run(self, model, spec: BatchSpec):
        if isinstance(spec, PairSpec):
            feeds = pair_feeds(model, spec)
        else:
            feeds = text_feeds(model, spec)[0]
        return model.run(feeds, mode="dense")  # maps reduced below and dropped with the batch

    def __call__(self, task: CompareTask) -> ComparePartial:
        spec = task.a
        ra = self._run(self.models[0], spec)
        rb = self._run(self.models[1], task.b if task.b is not None else spec)
        assert spec.lengths is not None
        lengths = {"encoder": np.asarray(spec.lengths, np.int64)}
        if isinstance(spec, PairSpec):
            assert spec.dec_lengths is not None
            lengths["decoder"] = np.asarray(spec.dec_lengths, np.int64)
        n, nh = spec.size, self.setup.heads
        js, diff = np.zeros((n, nh)), np.zeros((n, nh))
        agree, rows = np.zeros((n, nh), np.int64), np.zeros((n, nh), np.int64)
        for m in self.setup.matched:
            a, b = ra.maps[m.a].array(), rb.maps[m.b].array()
            if a.shape != b.shape:
                raise AttnvizError(
                    f"{m.stack} {m.kind} L{m.layer}: maps {list(a.shape)} in A and {list(b.shape)} in B on batch "
                    f"{task.batch_id} ([batch, heads, query, key]); compare models of one architecture"
                )
            n_q = np.minimum(lengths.get(m.query, lengths["encoder"]), a.shape[2])
            got = batch_head_sums(a, b, np.arange(a.shape[2])[None, :] < n_q[:, None])
            h = slice(m.offset, m.offset + m.heads)
            js[:, h], agree[:, h], diff[:, h] = got.js_sum, got.agree, got.max_abs_diff
            rows[:, h] = n_q[:, None]
        out = self._outputs(ra.outputs, rb.outputs, lengths["decoder" if "decoder" in lengths else "encoder"])
        tokens = np.sum(list(lengths.values()), axis=0)
        return ComparePartial(task.batch_id, np.asarray(spec.items, np.int64), tokens, js, agree, diff, rows, *out)

    def _outputs(self, oa: dict, ob: dict, lengths: np.ndarray):
        """Per item and output: the largest |Δ| over its real rows (a per-token output ``[B, T, ...]``), and for
        logits KL(A ‖ B) of the softmax over the last axis summed over those rows."""
        n, no = len(lengths), len(self.setup.outputs)
        mx = np.full((n, no), np.nan)
        kl = np.zeros((n, no))
        kl_rows = np.zeros((n, no), np.int64)
        for j, name in enumerate(self.setup.outputs):
            va, vb = oa.get(name), ob.get(name)
            if va is None or vb is None or np.shape(va) != np.shape(vb) or np.ndim(va) < 1 or len(va) != n:
                continue
            if not np.issubdtype(np.asarray(va).dtype, np.number):
                continue
            a, b = np.asarray(va, np.float64), np.asarray(vb, np.float64)
            per_token = a.ndim >= 3 and a.shape[1] == int(lengths.max())
            # rows: [B, R, ...]; a per-item output is one row an item
            a, b = (a, b) if per_token else (a[:, None], b[:, None])
            real = np.arange(a.shape[1])[None, :] < (lengths[:, None] if per_token else 1)
            d = np.abs(a - b).reshape(n, a.shape[1], -1).max(-1) if a[0].size else np.zeros(a.shape[:2])
            mx[:, j] = np.where(real, d, 0.0).max(-1)
            if is_logits(name) and a.shape[-1] > 1:
                la, lb = log_softmax(a), log_softmax(b)
                k = (np.exp(la) * (la - lb)).sum(-1) / np.log(2.0)  # [B, R, ...]
                k = k.reshape(n, a.shape[1], -1)
                kl[:, j] = np.where(real[..., None], k, 0.0).sum((1, 2))
                kl_rows[:, j] = real.sum(1) * k.shape[-1]
        return mx, kl, kl_rows


@dataclass
class CompareAccumulator:
    """Running totals, folded strictly in batch order: per head, and per item (for ``items.parquet``)."""

    heads: int
    outputs: int
    next_batch: int = 0
    js_sum: np.ndarray = field(init=False)
    agree: np.ndarray = field(init=False)
    rows: np.ndarray = field(init=False)
    max_abs_diff: np.ndarray = field(init=False)
    out_max: np.ndarray = field(init=False)
    out_kl_sum: np.ndarray = field(init=False)
    out_kl_rows: np.ndarray = field(init=False)
    # per item, in batch order, one array a batch (joined when read: no quadratic copying over a long corpus):
    # its index, and tokens, JS sum and rows over all heads, agreeing rows, largest |Δ|, then per output its
    # largest |Δ|, KL sum and KL rows
    index_parts: list[np.ndarray] = field(init=False)
    cols_parts: list[np.ndarray] = field(init=False)
    items: int = field(init=False)

    ITEM_COLS = ("tokens", "js_sum", "rows", "agree", "max_abs_diff")

    def __post_init__(self) -> None:
        self.js_sum = np.zeros(self.heads)
        self.agree = np.zeros(self.heads, np.int64)
        self.rows = np.zeros(self.heads, np.int64)
        self.max_abs_diff = np.zeros(self.heads)
        self.out_max = np.full(self.outputs, np.nan)
        self.out_kl_sum = np.zeros(self.outputs)
        self.out_kl_rows = np.zeros(self.outputs, np.int64)
        self.index_parts = [np.zeros(0, np.int64)]
        self.cols_parts = [np.zeros((0, len(self.ITEM_COLS) + 3 * self.outputs))]
        self.items = 0

    @property
    def item_index(self) -> np.ndarray:
        if len(self.index_parts) > 1:
            self.index_parts = [np.concatenate(self.index_parts)]
        return self.index_parts[0]

    @property
    def item_cols(self) -> np.ndarray:
        if len(self.cols_parts) > 1:
            self.cols_parts = [np.concatenate(self.cols_parts)]
        return self.cols_parts[0]

    @property
    def tokens(self) -> int:
        return int(self.item_cols[:, 0].sum())

    def fold(self, p: ComparePartial) -> None:
        if p.batch_id != self.next_batch:
            raise AttnvizError(f"internal: batch {p.batch_id} arrived while {self.next_batch} was expected")
        if p.js_sum.shape[1] != self.heads:
            raise AttnvizError(f"internal: a worker compared {p.js_sum.shape[1]} heads, the driver {self.heads}")
        per_item = np.column_stack(
            [
                p.tokens,
                p.js_sum.sum(1),
                p.rows.sum(1),
                p.agree.sum(1),
                p.max_abs_diff.max(1, initial=0.0),
                p.out_max,
                p.out_kl_sum,
                p.out_kl_rows,
            ]
        )
        out_max = np.fmax(self.out_max, np.fmax.reduce(p.out_max, axis=0))  # NaN (not compared) where both are
        # built aside and swapped in by one dict update: a Ctrl-C between bytecodes finds the batch wholly folded
        # or not at all, so a checkpoint never counts it twice
        self.__dict__.update(
            js_sum=self.js_sum + p.js_sum.sum(0),
            agree=self.agree + p.agree.sum(0),
            rows=self.rows + p.rows.sum(0),
            max_abs_diff=np.maximum(self.max_abs_diff, p.max_abs_diff.max(0, initial=0.0)),
            out_max=out_max,
            out_kl_sum=self.out_kl_sum + p.out_kl_sum.sum(0),
            out_kl_rows=self.out_kl_rows + p.out_kl_rows.sum(0),
            index_parts=[*self.index_parts, np.asarray(p.items, np.int64)],
            cols_parts=[*self.cols_parts, per_item],
            items=self.items + len(p.items),
            next_batch=self.next_batch + 1,
        )

    FIELDS = (
        "js_sum",
        "agree",
        "rows",
        "max_abs_diff",
        "out_max",
        "out_kl_sum",
        "out_kl_rows",
        "item_index",
        "item_cols",
    )

    def save(self, path: Path, fingerprint: str, settings: dict | None = None) -> None:
        """``settings``: the run's settings by name (corpus/resume_settings.py), for a refused resume to name."""
        from attnviz.corpus import resume_settings

        with atomic_path(path) as tmp, open(tmp, "wb") as f:  # an interrupt mid-write keeps the previous one
            np.savez(
                f,
                fingerprint=np.array(fingerprint),
                next_batch=self.next_batch,
                **{n: getattr(self, n) for n in self.FIELDS},
                **resume_settings.saved(settings),
            )

    @classmethod
    def load(cls, path: Path, fingerprint: str, heads: int, outputs: int) -> CompareAccumulator | None:
        """The checkpoint at ``path`` if it is this run's (None: no checkpoint, or another run's)."""
        if not os.path.lexists(path):
            return None
        f = open_regular(path, "checkpoint")  # a FIFO named checkpoint.npz is refused, never waited on
        try:
            with f, np.load(f) as z:
                if str(z["fingerprint"]) != fingerprint:
                    return None
                acc = cls(heads, outputs, int(z["next_batch"]))
                for n in cls.FIELDS:
                    if n in ("item_index", "item_cols"):
                        setattr(acc, "index_parts" if n == "item_index" else "cols_parts", [z[n]])
                    else:
                        setattr(acc, n, z[n])
                acc.items = len(acc.item_index)
                if acc.js_sum.shape != (heads,) or acc.item_cols.shape[1:] != (len(cls.ITEM_COLS) + 3 * outputs,):
                    raise ValueError("shapes")
        except Exception as e:  # truncated or not ours
            raise AttnvizError(
                f"{path}: unreadable checkpoint ({checkpoint_problem(e)}); delete it to start over"
            ) from None
        return acc

    def head_measures(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(mean JS bits, top-1 agreement, largest |Δ|) per head; a head with no rows: NaN, NaN, 0."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.js_sum / self.rows, self.agree / self.rows, self.max_abs_diff

    def output_rows(self, names: tuple[str, ...]) -> list[dict]:
        """One entry per output compared on every batch, as the single-input form writes ``run.json``'s."""
        out = []
        for j, name in enumerate(names):
            if np.isnan(self.out_max[j]):
                continue
            kl = float(self.out_kl_sum[j] / self.out_kl_rows[j]) if self.out_kl_rows[j] else None
            out.append({"name": name, "max_abs_diff": float(self.out_max[j]), "kl_bits": kl})
        return out
