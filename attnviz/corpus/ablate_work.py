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
* the largest |Δ| of the main output, and whether the argmax changed at some real position.

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
LABELS = ("class", "next-token")  # what a corpus's labels are: a classifier's class per item, or the next tokens


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

    def many(self, specs: list[LabelledSpec]) -> list[AblatePartial]:
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
        kl, dmax, changed = np.zeros(n), np.zeros(n), np.zeros(n, np.int64)
        loss, acc = np.zeros(n), np.zeros(n)
        fed_cache: dict[int, np.ndarray] = {}
        for a, off in enumerate(s.offs):
            got = self.run(feeds, off, self._fed(off, lengths, zeros, fed_cache))
            kl[a], dmax[a], changed[a], loss[a], acc[a] = m.against(got)
        t2, c2 = time.perf_counter(), time.process_time()
        return AblatePartial(
            spec.batch_id,
            spec.size,
            m.labelled,
            kl,
            dmax,
            changed,
            loss,
            acc,
            m.base_loss,
            m.base_acc,
            {"base_wall": t1 - t0, "base_cpu": c1 - c0, "ablations_wall": t2 - t1, "ablations_cpu": c2 - c1},
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
    """The base run of one batch and what each ablated run is measured against it with."""

    def __init__(self, base: np.ndarray, lengths: np.ndarray, spec: LabelledSpec, labels: str | None, dist: bool):
        self.base = base
        self.dist = dist
        b = len(lengths)
        per_token = base.ndim >= 3 and base.shape[:2] == (b, spec.ids.shape[1] if spec.ids is not None else -1)
        # [B, T] real positions (a per-token output), or None: one position per item
        self.rows = (np.arange(base.shape[1])[None, :] < lengths[:, None]) if per_token else None
        self.log = log_softmax(base) if dist else None
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
            self.base_loss, self.base_acc = self._loss_acc(self.log)

    def _per_item_count(self) -> np.ndarray:
        assert self.targets is not None
        return (self.targets >= 0).reshape(len(self.targets), -1).sum(1)

    def _loss_acc(self, log: np.ndarray) -> tuple[float, float]:
        """Σ over labelled items of the mean loss and the mean accuracy over each item's labelled positions."""
        t = self.targets
        assert t is not None
        valid = t >= 0
        picked = np.take_along_axis(log, np.where(valid, t, 0)[..., None], -1)[..., 0]
        right = (log.argmax(-1) == t) & valid
        n = self._per_item_count()
        has = n > 0
        loss = np.where(valid, -picked, 0.0).reshape(len(t), -1).sum(1)
        hits = right.reshape(len(t), -1).sum(1)
        return float(np.sum(loss[has] / n[has])), float(np.sum(hits[has] / n[has]))

    def against(self, got: np.ndarray) -> tuple[float, float, int, float, float]:
        """(Σ item KL bits, max |Δ|, items whose argmax changed, Σ item loss, Σ item accuracy) of an ablated run."""
        rows = self.rows
        diff = np.abs(got.astype(np.float64) - self.base)
        dmax = float((diff[rows] if rows is not None else diff).max()) if diff.size else 0.0
        if not self.dist or self.log is None:
            return 0.0, dmax, 0, 0.0, 0.0
        lq = log_softmax(got)
        kl_pos = (np.exp(self.log) * (self.log - lq)).sum(-1) / LOG2  # [B, T] or [B]
        flip = self.base.argmax(-1) != got.argmax(-1)
        if rows is not None:
            kl_item = (kl_pos * rows).sum(1) / np.maximum(rows.sum(1), 1)
            flipped = (flip & rows).any(1)
        else:
            kl_item, flipped = kl_pos.reshape(len(kl_pos), -1).mean(1), flip.reshape(len(flip), -1).any(1)
        loss = acc = 0.0
        if self.targets is not None:
            loss, acc = self._loss_acc(lq)
        return float(kl_item.sum()), dmax, int(flipped.sum()), loss, acc
