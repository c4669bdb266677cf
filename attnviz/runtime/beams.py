"""Beam search, every beam's attention kept: transformers' ``generate(num_beams=K, do_sample=False,
length_penalty=1.0, early_stopping=False, num_return_sequences=K)`` for one sequence.

:class:`BeamSearch` is the scorer alone (numpy): fed each step's logits, one row per running beam, it keeps the
K running beams and the K best finished hypotheses exactly as transformers 5's ``_beam_search`` does (the top
2K continuations of all beams' summed log-probabilities; a continuation ending in EOS, or reaching the last
step, is finished when it is among the top K of them, its score the sum divided by its generated length **
``length_penalty``; the loop ends when every continuation is finished, or when K are finished and the best
running beam, divided by the length so far, cannot beat the worst of them).  Each hypothesis keeps, per step,
the batch row of that step's run it descended from (transformers' ``beam_indices``): its attention at that step
is that row's.

Two runners: :func:`rerun_search` (no cache: each running beam's whole sequence re-run for its logits; the maps
come afterwards from one run of each final hypothesis, whose causal row *i* is exactly its step *i*) and
:func:`cache_search` (a stepper whose cache can be reordered: every step feeds the K running beams' last
tokens as one batch, records the step's rows, and takes the cache's batch rows by the beams' parents).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from attnviz.core.frames import FramesMap
from attnviz.runtime.generate import NO_SUPPRESS, MapAssembler, Suppress, _check

_NEG = np.float32(-1.0e9)  # transformers' "never": added to scores that must not be chosen


@dataclass(frozen=True)
class Hypothesis:
    """A finished beam: its generated ids (EOS included when reached), its score (summed log-probabilities over
    its generated length ** length_penalty) and, per step, the batch row of that step's run it came from."""

    ids: tuple[int, ...]
    score: float
    rows: tuple[int, ...]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, np.float32)
    m = np.max(x, axis=-1, keepdims=True)
    z = x - m
    return z - np.log(np.sum(np.exp(z), axis=-1, keepdims=True))


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest scores, largest first (ties: the lower index first)."""
    k = min(k, scores.size)
    part = np.argpartition(-scores, k - 1)[:k] if k < scores.size else np.arange(scores.size)
    return part[np.lexsort((part, -scores[part]))]


class BeamSearch:
    """The beam scorer for one sequence (see the module's docstring); :meth:`advance` per step."""

    def __init__(
        self,
        beams: int,
        steps: int,
        eos: int | None,
        suppress: Suppress = NO_SUPPRESS,
        length_penalty: float = 1.0,
    ):
        self.k, self.steps, self.eos = int(beams), int(steps), None if eos is None else int(eos)
        self.suppress, self.length_penalty = suppress, float(length_penalty)
        k = self.k
        # running beams: ids, rows, summed log-probabilities (only the first counts at first: all share the prompt)
        self.ids: list[tuple[int, ...]] = [()] * k
        self.rows: list[tuple[int, ...]] = [()] * k
        self.scores = np.full(k, _NEG, np.float32)
        self.scores[0] = 0.0
        # the K finished slots, best first (an empty slot: score -1e9, not finished)
        self.done_ids: list[tuple[int, ...]] = [()] * k
        self.done_rows: list[tuple[int, ...]] = [()] * k
        self.done_scores = np.full(k, _NEG, np.float32)
        self.finished = np.zeros(k, bool)
        self.improvable = True  # transformers' is_early_stop_heuristic_unsatisfied
        self.step = 0
        self.done = self.steps <= 0
        self.parents = np.zeros(k, np.int64)  # each running beam's row in the last step's run

    @property
    def tokens(self) -> list[int]:
        """The running beams' last tokens: what the next step feeds, one row each."""
        return [ids[-1] for ids in self.ids]

    def advance(self, logits: np.ndarray) -> None:
        """One step: ``logits`` ``[n, V]``, row ``i`` the next-token logits of the sequence the last step's row
        ``i`` ran (n = 1 at the first step: the prompt, every beam's; else one row per running beam)."""
        k, t = self.k, self.step
        lp = log_softmax(logits)
        if lp.shape[0] != k:  # the first step: K copies of the prompt's row, as transformers runs them
            lp = np.broadcast_to(lp[:1], (k, lp.shape[-1])).copy()
        sup = [i for i in self.suppress.at(t) if 0 <= i < lp.shape[-1]]
        if sup:
            lp[:, sup] = -np.inf
        v = lp.shape[-1]
        acc = (lp + self.scores[:, None]).reshape(-1)
        keep = max(2, 1 + (self.eos is not None)) * k  # transformers' beams_to_keep
        top = _top(acc, keep)
        beam, tok, cand = top // v, top % v, acc[top]
        last = t + 1 >= self.steps
        hits = (
            np.full(len(top), last) if last else (tok == self.eos if self.eos is not None else np.zeros(len(top), bool))
        )
        cand_ids = [self.ids[b] + (int(w),) for b, w in zip(beam, tok)]
        cand_rows = [self.rows[b] + (int(min(b, logits.shape[0] - 1)),) for b in beam]
        # the K best that go on (the finished ones pushed out of reach)
        running = cand + hits.astype(np.float32) * _NEG
        nxt = _top(running, k)
        self.parents = np.asarray([min(int(beam[i]), logits.shape[0] - 1) for i in nxt], np.int64)
        self.ids = [cand_ids[i] for i in nxt]
        self.rows = [cand_rows[i] for i in nxt]
        self.scores = running[nxt].astype(np.float32)
        # finished: among the top K continuations only, length-normalised, kept where better than a slot's
        did = hits & (np.arange(len(top)) < k)
        norm = (cand / np.float32((t + 1) ** self.length_penalty)).astype(np.float32)
        if not self.improvable:
            norm = norm + _NEG
        norm = np.where(did, norm, norm + _NEG).astype(np.float32)
        merged = np.concatenate([self.done_scores, norm])
        pick = _top(merged, k)
        all_ids = self.done_ids + cand_ids
        all_rows = self.done_rows + cand_rows
        all_fin = np.concatenate([self.finished, did])
        self.done_ids = [all_ids[i] for i in pick]
        self.done_rows = [all_rows[i] for i in pick]
        self.done_scores = merged[pick].astype(np.float32)
        self.finished = all_fin[pick]
        self.step = t = t + 1
        # can a running beam still beat the worst finished one? (early_stopping=False: judged at today's length)
        best = self.scores[0] / np.float32(t**self.length_penalty)
        worst = np.where(self.finished, np.min(self.done_scores), _NEG)
        self.improvable = bool(self.improvable and np.any(best > worst))
        self.done = not self.improvable or bool(np.all(hits))

    def hypotheses(self) -> list[Hypothesis]:
        """The K finished hypotheses, best first (those that finished: every one, unless none could)."""
        return [
            Hypothesis(ids, float(s), rows)
            for ids, s, rows, f in zip(self.done_ids, self.done_scores, self.done_rows, self.finished)
            if f
        ]


@dataclass
class BeamGeneration:
    """A beam search's hypotheses, best first, and with a cache each one's assembled maps (by canonical site)."""

    hypotheses: list[Hypothesis]
    seconds: float
    method: str  # "kv-cache" | "full re-run"
    maps: list[dict[int, np.ndarray | FramesMap]] | None = None
    info: dict = field(default_factory=dict)
    steps: int = 0  # the steps run (each one a run of the running beams)


def rerun_search(
    next_logits: Callable[[list[list[int]]], np.ndarray],
    prompt: list[int],
    search: BeamSearch,
    progress=None,
    cancelled=None,
) -> BeamGeneration:
    """Beam search re-running the running beams' whole sequences for their next-token logits:
    ``next_logits(seqs)`` gives ``[len(seqs), V]`` (the beams' sequences are equally long at every step)."""
    t0 = time.perf_counter()
    while not search.done:
        _check(search.step, search.steps, progress, cancelled)
        seqs = [list(prompt)] if search.step == 0 else [list(prompt) + list(ids) for ids in search.ids]
        search.advance(np.asarray(next_logits(seqs), np.float32))
    return BeamGeneration(search.hypotheses(), time.perf_counter() - t0, "full re-run", steps=search.step)


def batch_rows(feeds: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """``feeds`` for ``n`` rows: every batch-1 feed of rank >= 2 (the source, its mask, an image) repeated ``n``
    times on its batch axis; the beams' own (their tokens, mask, positions) have their ``n`` rows already."""
    if n <= 1:
        return feeds
    return {k: np.repeat(v, n, axis=0) if np.ndim(v) >= 2 and np.shape(v)[0] == 1 else v for k, v in feeds.items()}


def cache_search(stepper, feeds: dict, search: BeamSearch, progress=None, cancelled=None) -> BeamGeneration:
    """Beam search through a cache: the prompt once (batch 1), then every step the running beams as one batch,
    the stepper's cache first taken by the beams' parents (``stepper.reorder(rows)``).  The steps run here, one
    request each (with crash isolation too): the child's loop (:mod:`steps`) chooses greedily beside the session,
    and a beam step's choice needs all K rows' logits and the reorder, which one request per step carries."""
    t0 = time.perf_counter()
    if search.done:
        return BeamGeneration([], 0.0, "kv-cache", [], {})
    _check(0, search.steps, progress, cancelled)
    out = stepper.start(feeds)
    prompt_maps = dict(out.maps)
    info = dict(out.info)
    search.advance(out.logits)
    step_maps: list[Mapping[int, np.ndarray | FramesMap]] = [{}]  # step 0's rows are the prompt's
    while not search.done:
        _check(search.step, search.steps, progress, cancelled)
        stepper.reorder(search.parents)
        out = stepper.step(search.tokens)
        step_maps.append(out.maps)
        info = dict(out.info) or info
        search.advance(out.logits)
    hyps = search.hypotheses()
    return BeamGeneration(
        hyps,
        time.perf_counter() - t0,
        "kv-cache",
        [hypothesis_maps(prompt_maps, step_maps, h) for h in hyps],
        info,
        steps=search.step,
    )


def hypothesis_maps(
    prompt: Mapping[int, np.ndarray | FramesMap], steps: list[Mapping[int, np.ndarray | FramesMap]], h: Hypothesis
) -> dict[int, np.ndarray | FramesMap]:
    """One hypothesis' maps: the prompt's rows, then at each step after the first the row of the beam it descended
    from (its last token is never fed: as many rows as the full re-run of its sequence has)."""
    asm = MapAssembler()
    asm.add({i: a for i, a in prompt.items()})
    for t in range(1, len(h.ids)):
        r = h.rows[t]
        asm.add({i: a if isinstance(a, FramesMap) else a[r : r + 1] for i, a in steps[t].items()})
    return asm.maps()
