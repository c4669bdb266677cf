"""Corpus head ablation, the worker side: one gated session per worker serves every head × batch.

:class:`AblateSetup` is a :class:`~attnviz.corpus.engines.WorkerSetup` whose worker (:class:`HeadAblator`) holds
one session of the gated graph (:func:`attnviz.runtime.graph.ablate.gate_heads`: a ``[H]`` mask input per site):
a batch runs once with every mask at one (the base), then once per ablation with that ablation's heads at zero —
the heads are switched by the masks fed, never by new sessions.  A batch becomes an :class:`AblatePartial` of
per-ablation sums over its items, which the driver (:mod:`attnviz.corpus.ablate_corpus`) folds in batch order, so
the local pool and Ray give the same numbers.

Per item (its real positions only: a padded position never counts):

* KL(base ‖ ablated) of the softmax over the main output's last axis, in bits, averaged over the item's real
  positions (one position for a classifier's ``[B, C]`` logits);
* with labels, the cross-entropy (nats) and accuracy of the base and the ablated run: a classifier's label, or for
  a decoder the next token at each position but the last (averaged over those positions);
* the largest |Δ| of the main output over its real positions (summed over the batch's items, so the driver
  can take the mean over the corpus's items; and the batch's largest), and whether the argmax changed at some
  real position.

``mode="fed"`` (``--mode mean``) feeds each ablated head's rows from the corpus mean the driver computed
(:func:`mean_rows`): see :mod:`attnviz.corpus.ablate_corpus` for what the mean is.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass, field

import numpy as np

from attnviz import AttnvizError
from attnviz.core.compare import log_softmax
from attnviz.corpus.engines import WorkerSetup
from attnviz.corpus.plan import BatchSpec, text_feeds

LOG2 = float(np.log(2.0))
Off = tuple[tuple[int, tuple[int, ...]], ...]  # one ablation: (site, heads switched off together), ...
LABELS = ("class", "next-token")
MEASURE_BYTES = (
    16 * 2**20
)  # ablated outputs measured together at most (their float64 temporaries: ~6× that)  # what a corpus's labels are: a classifier's class per item, or the next tokens


@dataclass
class LabelledSpec(BatchSpec):
    """A text batch with each row's class label (-1: none); a decoder's labels are its own next tokens."""

    labels: np.ndarray | None = None


@dataclass
class AblatePartial:
    """One batch's sums per ablation (``[A]`` arrays, A = the ablations in the setup's order)."""

    batch_id: int
    items: int
    labelled: int  # items with a label (a decoder: with at least one next token)
    kl: np.ndarray  # Σ over items of each item's mean KL(base ‖ ablated), bits
    dmax: np.ndarray  # the largest |base − ablated| over the batch's real positions
    dsum: np.ndarray  # Σ over items of each item's largest |base − ablated| over its real positions
    changed: np.ndarray  # items whose argmax changed at some real position
    loss: np.ndarray  # Σ over labelled items of the ablated run's loss (nats)
    acc: np.ndarray  # Σ over labelled items of the ablated run's accuracy
    base_loss: float
    base_acc: float
    # seconds in the worker: the base forward, and every ablation (forward + measures), wall and CPU
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class AblateSetup(WorkerSetup):
    """What each worker needs: the gated sites, the ablations, the mode, the labels and the corpus means."""

    sites: tuple[int, ...] = ()  # the gated sites (indices into model.sites)
    offs: tuple[Off, ...] = ()  # the ablations, in the order of the partials' arrays
    mode: str = "zero"  # graph gate mode: "zero", or "fed" (rows from ``means``)
    labels: str | None = None  # None | one of LABELS
    means: bytes | None = None  # mode "fed": an .npz of each gated site's corpus-mean rows ``[H, T, T]``
    output: str = "logits"
    distribution: bool = True  # the output's last axis is a distribution's logits (KL, argmax, loss)

    def reducer(self) -> HeadAblator:  # type: ignore[override]  # another kind of worker for the same engines
        return HeadAblator(self)

    def warm(self) -> HeadAblator:  # type: ignore[override]
        return HeadAblator(self)


class HeadAblator:
    """One model, one gated session; turns a :class:`LabelledSpec` into an :class:`AblatePartial`."""

    def __init__(self, setup: AblateSetup):
        from attnviz.runtime import open_model
        from attnviz.runtime.ablation import known_heads
        from attnviz.runtime.graph.ablate import GateRefused, gate_heads

        self.setup = setup
        self.groups: list = list(setup.groups)  # what engines._work compares with the setup it is handed
        self.model = open_model(setup.model, provider=setup.provider, tokenizer=setup.tokenizer, threads=setup.threads)
        known_heads(self.model)
        try:
            edited, gates = gate_heads(self.model.graph, self.model.graph_sites, list(setup.sites), setup.mode)
        except GateRefused as e:
            raise AttnvizError(str(e)) from None
        self.gates = {g.site: g for g in gates}
        self.sess = self.model.extra_session(edited, f"ablate sites={sorted(setup.sites)} mode={setup.mode}")
        self.means: dict[int, np.ndarray] = {}
        if setup.means is not None:
            with np.load(io.BytesIO(setup.means)) as z:
                self.means = {int(k): z[k] for k in z.files}

    def many(self, specs: list[LabelledSpec], depth: int = 1) -> list[AblatePartial]:
        """One batch at a time whatever ``depth`` (an ablation run keeps the process layout: AblateSetup's)."""
        return [self(s) for s in specs]

    def masks(self, off: Off) -> dict[str, np.ndarray]:
        out = {}
        for i, g in self.gates.items():
            m = np.ones(g.heads, np.float32)
            for site, heads in off:
                if site == i:
                    m[list(heads)] = 0.0
            out[g.input] = m
        return out

    def run(self, feeds: dict[str, np.ndarray], off: Off, fed: dict[str, np.ndarray]) -> np.ndarray:
        try:
            return self.sess.run([self.setup.output], {**feeds, **self.masks(off), **fed})[0]
        except Exception as e:  # onnxruntime's words in one line (as runtime.ablation)
            raise AttnvizError(f"the ablated model failed to run: {' '.join(str(e).split())[:300]}") from None

    def __call__(self, spec: LabelledSpec) -> AblatePartial:
        s = self.setup
        feeds, lengths, _ = text_feeds(self.model, spec)
        lengths = np.asarray(lengths, np.int64)
        assert spec.ids is not None
        t0, c0 = time.perf_counter(), time.process_time()
        zeros = self._no_fed()
        base = self.run(feeds, (), zeros)
        t1, c1 = time.perf_counter(), time.process_time()
        m = Measures(base, lengths, spec, s.labels if s.distribution else None, s.distribution)
        n = len(s.offs)
        kl, dmax, dsum, changed = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n, np.int64)
        loss, acc = np.zeros(n), np.zeros(n)
        fed_cache: dict[int, np.ndarray] = {}
        fwd, fwd_cpu = 0.0, 0.0  # the ablated forwards alone (the rest of t2 - t1 is the measures)
        # outputs are measured a few ablations at a time, stacked: numpy's per-call cost, paid once per stack,
        # was most of a small classifier's per-head excess over its forward (0.16 of 1.1 ms, profiled)
        stack: list[np.ndarray] = []
        first = 0
        for a, off in enumerate(s.offs):
            fed = self._fed(off, lengths, zeros, fed_cache)
            f0, g0 = time.perf_counter(), time.process_time()
            stack.append(self.run(feeds, off, fed))
            fwd, fwd_cpu = fwd + time.perf_counter() - f0, fwd_cpu + time.process_time() - g0
            if a + 1 == n or (len(stack) + 1) * base.nbytes > MEASURE_BYTES:
                got = m.against(np.stack(stack))
                for arr, v in zip((kl, dmax, dsum, changed, loss, acc), got):
                    arr[first : a + 1] = v
                stack, first = [], a + 1
        t2, c2 = time.perf_counter(), time.process_time()
        return AblatePartial(
            spec.batch_id,
            spec.size,
            m.labelled,
            kl,
            dmax,
            dsum,
            changed,
            loss,
            acc,
            m.base_loss,
            m.base_acc,
            {
                "base_wall": t1 - t0,
                "base_cpu": c1 - c0,
                "ablations_wall": t2 - t1,
                "ablations_cpu": c2 - c1,
                "forwards_wall": fwd,
                "forwards_cpu": fwd_cpu,
            },
        )

    def _no_fed(self) -> dict[str, np.ndarray]:
        """Mode "fed": a zero that broadcasts, for every site whose heads all stay on (its mean is never used)."""
        return {g.fed: np.zeros((1, 1, 1, 1), np.float32) for g in self.gates.values() if g.fed}

    def _fed(self, off: Off, lengths: np.ndarray, zeros: dict, cache: dict[int, np.ndarray]) -> dict[str, np.ndarray]:
        if not zeros:
            return {}
        fed = dict(zeros)
        t = int(spec_width(lengths))
        for site, _ in off:
            g = self.gates[site]
            if site not in cache:
                cache[site] = mean_rows(self.means[site], lengths, t)
            fed[str(g.fed)] = cache[site]
        return fed


def spec_width(lengths: np.ndarray) -> int:
    return int(lengths.max()) if lengths.size else 0


def mean_rows(mean: np.ndarray, lengths: np.ndarray, t: int) -> np.ndarray:
    """``[B, H, t, t]``: for each row of a batch with ``lengths`` real tokens, the corpus-mean rows ``mean``
    (``[H, T, T]``) restricted to that row's real keys and renormalised to sum to 1 (query rows past its length,
    padding, get zeros: nothing reads them)."""
    h = mean.shape[0]
    out = np.zeros((len(lengths), h, t, t), np.float32)
    for b, n in enumerate(lengths.tolist()):
        block = mean[:, :n, :n].astype(np.float64)
        mass = block.sum(-1, keepdims=True)
        out[b, :, :n, :n] = np.where(mass > 0, block / np.where(mass > 0, mass, 1.0), 0.0)
    return out


class Measures:
    """The base run of one batch and what ablated runs are measured against it with (``n`` at a time, stacked)."""

    def __init__(self, base: np.ndarray, lengths: np.ndarray, spec: LabelledSpec, labels: str | None, dist: bool):
        self.base = base
        self.dist = dist
        b = self.items = len(lengths)
        per_token = base.ndim >= 3 and base.shape[:2] == (b, spec.ids.shape[1] if spec.ids is not None else -1)
        # [B, T] real positions (a per-token output), or None: one position per item
        self.rows = (np.arange(base.shape[1])[None, :] < lengths[:, None]) if per_token else None
        self.log = log_softmax(base) if dist else None
        self.p = np.exp(self.log) if self.log is not None else None
        self.top = base.argmax(-1)
        self.targets: np.ndarray | None = None  # [B] or [B, T] label index (-1: none)
        if labels == "class" and spec.labels is not None and not per_token:
            self.targets = np.asarray(spec.labels, np.int64)
        elif labels == "next-token" and per_token and spec.ids is not None:
            nxt = np.full(spec.ids.shape, -1, np.int64)
            nxt[:, :-1] = spec.ids[:, 1:]
            keep = np.arange(spec.ids.shape[1])[None, :] < (lengths - 1)[:, None]
            self.targets = np.where(keep, nxt, -1)
        self.labelled = 0
        self.base_loss = self.base_acc = 0.0
        if self.targets is not None and self.log is not None:
            self.labelled = int(np.sum(self._per_item_count() > 0))
            loss, acc = self._loss_acc(self.log[None])
            self.base_loss, self.base_acc = float(loss[0]), float(acc[0])

    def _per_item_count(self) -> np.ndarray:
        assert self.targets is not None
        return (self.targets >= 0).reshape(len(self.targets), -1).sum(1)

    def _loss_acc(self, log: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``[n]`` Σ over labelled items of the mean loss / accuracy over each item's labelled positions, for
        ``n`` stacked log-probabilities ``[n, B, (T,) C]``."""
        t = self.targets
        assert t is not None
        n, b = len(log), len(t)
        valid = t >= 0
        idx = np.broadcast_to(np.where(valid, t, 0)[None, ..., None], (n, *t.shape, 1))
        picked = np.take_along_axis(log, idx, -1)[..., 0]
        right = (log.argmax(-1) == t) & valid
        count = self._per_item_count()
        has = count > 0
        loss = np.where(valid, -picked, 0.0).reshape(n, b, -1).sum(2)
        hits = right.reshape(n, b, -1).sum(2)
        return (loss[:, has] / count[has]).sum(1), (hits[:, has] / count[has]).sum(1)

    def against(self, got: np.ndarray) -> tuple[np.ndarray, ...]:
        """For ``n`` stacked ablated runs ``[n, *base.shape]``: ``[n]`` arrays of the Σ item KL in bits, the max
        |Δ|, the Σ over items of each item's max |Δ|, the items whose argmax changed, the Σ item loss and the Σ
        item accuracy."""
        n, rows = len(got), self.rows
        # |Δ| in the output's own type (float64 copies of MiniLM's hidden states were 8 % of its forward)
        diff = np.abs(got - self.base)
        item = self._item_max(diff)
        dmax, dsum = item.max(1).astype(np.float64), item.sum(1, dtype=np.float64)
        zeros = np.zeros(n)
        if not self.dist or self.log is None:
            return zeros, dmax, dsum, zeros.astype(np.int64), zeros, zeros
        lq = log_softmax(got)  # float64
        kl_pos = (self.p * (self.log - lq)).sum(-1) / LOG2  # [n, B, T] or [n, B]
        flip = self.top != got.argmax(-1)
        if rows is not None:
            kl_item = (kl_pos * rows).sum(2) / np.maximum(rows.sum(1), 1)
            flipped = (flip & rows).any(2)
        else:
            kl_item, flipped = kl_pos.reshape(n, len(self.base), -1).mean(2), flip.reshape(n, len(self.base), -1).any(2)
        loss, acc = self._loss_acc(lq) if self.targets is not None else (zeros, zeros)
        return kl_item.sum(1), dmax, dsum, flipped.sum(1), loss, acc

    def _item_max(self, diff: np.ndarray) -> np.ndarray:
        """``[n, B]``: each item's largest |Δ| over its real positions (a padded position's is never read; an
        output without a batch axis, or an empty one, is every item's one value)."""
        n, b = len(diff), self.items
        if not diff.size:
            return np.zeros((n, b))
        if self.base.ndim == 0 or self.base.shape[0] != b:  # no batch axis: its largest, the same for every item
            return np.repeat(diff.reshape(n, -1).max(1)[:, None], b, axis=1)
        if self.rows is not None:
            real = self.rows.reshape(1, *self.rows.shape, *([1] * (diff.ndim - 3)))
            diff = np.where(real, diff, 0)  # |Δ| >= 0: a zero never wins a real position's maximum
        return diff.reshape(n, b, -1).max(2)
