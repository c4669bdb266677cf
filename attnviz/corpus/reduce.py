"""Each batch's maps become a :class:`Partial` (per-head sums and top-k candidates); partials fold in batch order.

:class:`Partial`, :class:`HeadGroup` and :func:`fold_items` live in :mod:`attnviz.corpus.fold` (shared with
:mod:`attnviz.corpus.graph_reduce`, which this module imports: not the other way round) and are re-exported here.

Folding sums in batch order makes the result independent of worker count, engine and resume point: the
same float64 additions happen in the same order whichever process produced each partial.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz import AttnvizError
from attnviz.core import metadata as md
from attnviz.core.cross_stats import cross_row_stats, diagonal_key
from attnviz.core.row_sums import ItemStats
from attnviz.core.stats import row_stats
from attnviz.core.untrusted import checkpoint_problem, open_regular, parse_json
from attnviz.core.writes import atomic_path
from attnviz.corpus.fold import FrameShape, HeadGroup, Partial, S, fold_items, layout, signs, sites_layout
from attnviz.corpus.fold import key_columns as _cols
from attnviz.corpus.plan import BatchSpec, image_feeds, text_feeds

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from attnviz.corpus.audio_items import AudioSpec
    from attnviz.corpus.graph_reduce import InGraphReducer
    from attnviz.corpus.pairs import PairSpec
    from attnviz.runtime.light_model import LightModel
    from attnviz.runtime.model import AttentionModel

_NO_ITEM = np.iinfo(np.int64).max  # an empty top-list slot (item -1) sorts after every item
EXAMPLE_RANKING = "direction"  # run.json: top-k examples at each score's interesting end (core/score_direction.py)


@dataclass(frozen=True)
class Axis:
    """One side of a batch (the source / encoder or the target / decoder): real lengths, special keys."""

    lengths: np.ndarray  # [B]
    special: np.ndarray  # [B, T] bool
    causal: bool = False


def reduce_maps(
    maps: list[np.ndarray],
    groups: list[HeadGroup],
    axes: dict[str, Axis],
    items: list[int],
    k: int,
    batch_id: int,
    tie: bool = False,
) -> Partial:
    """``axes[stack]`` is the query side of that stack's sites; a cross site's keys are the encoder's.
    ``tie``: each item's best row is the first within ``ROW_TIE`` of the best (else the exact argmax)."""
    parts = []
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
            if p.shape[-2] != tk:  # LongT5's local blocks merged into heads: runtime.analyze.refuse_off_tokens
                raise AttnvizError(
                    f"the attention at {g.stack} {g.kind} L{g.layer} is a {list(p.shape)} [B, H, Tq, Tk] map: it "
                    "is not computed as one [query, key] map over the tokens (local attention in blocks, as "
                    "LongT5's and Longformer's), which attnviz cannot reduce yet; a model with full attention runs"
                )
            values, valid = row_stats(p, q.lengths, sp, q.causal)
            diag = None

        def key_of(name, rows, p=p, real=real, sp=sp, diag=diag):
            return _cols(name, p, rows, real, sp, diag)

        parts.append((g, ItemStats.from_rows(values, valid, key_of, tie, signs(g.kind))))
    tokens = sum(int(a.lengths.sum()) for a in axes.values())
    return fold_items(parts, items, k, batch_id, tokens)


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
        in_graph: bool = True,
        probe: bool = True,
        opened: AttentionModel | LightModel | None = None,
    ):
        """``probe=False`` (a pool worker warming up before the driver has probed): the model is not run on
        dummy inputs here, which would build a session of the model with every map exposed only to count heads;
        the statistics session is built from the sites the graph declares, and the heads and kind the driver's
        probe found come with the first batch (:meth:`adopt`).  ``opened``: the model of ``model_path`` opened
        with these arguments already (a pool worker's, probed for the driver: engines._probe), taken over instead
        of opening it again; or a :class:`~attnviz.runtime.light_model.LightModel` (a second command's worker:
        what earlier commands kept of it), whose statistics session is made without opening the model, which
        :attr:`model` opens only where something else is asked of it."""
        from attnviz.runtime import inputs as ip
        from attnviz.runtime.light_model import LightModel

        self._light = opened if isinstance(opened, LightModel) else None
        self._model: AttentionModel | None = None
        if not isinstance(opened, LightModel):
            from attnviz.runtime import open_model

            self._model = (
                opened
                if opened is not None
                else open_model(model_path, provider=provider, tokenizer=tokenizer, threads=threads)
            )
        if md.section(self._desc.meta, "windows"):
            # per-head statistics assume one token axis per stack; Swin's stages each have their own grid
            raise AttnvizError(
                f"{Path(model_path).name}: corpus statistics over windowed (Swin) attention are not supported yet; "
                "inspect its images one at a time (attnviz open / extract / figure)"
            )
        if probe and not (self._light is not None and self._light.probed):  # (a light model's probe was kept)
            self.model.probe()
        if self._model is not None:  # (a light model is a text model's: no frames)
            from attnviz.runtime.model import AttentionModel  # (loaded by open_model already)

            # a VLM's vision file alone: a corpus reduces each frame's own map (_tower), never the block-diagonal
            # map (vlm_tower.TowerFrames); an encoder-decoder folder's ModelSet has no frames
            frames = self._model.frames if isinstance(self._model, AttentionModel) else None
            if frames is not None:
                frames.whole = False
        desc = self._desc
        self.kind = desc.kind
        self.k = k
        self.heads_known = probe or groups is not None
        if groups is None:  # the model's own: unprobed, only which sites (their heads come with adopt)
            groups = layout(desc.sites) if probe else sites_layout(desc.sites)
        self.groups = groups
        self.image_spec = None
        if self.kind == "vision":
            img = next(i for i in self.model.inputs if self.model.roles[i.name] == "image")
            self.image_spec = ip.image_spec(self.model.meta, img.shape)
        # row sums computed inside onnxruntime (built on the first batch that can use them; False: maps only)
        self.in_graph: InGraphReducer | bool | None = None if in_graph else False
        self.image_axis: tuple[int, np.ndarray] | None = None  # images: (tokens, special keys) once seen
        self._runs: tuple[int, ThreadPoolExecutor] | None = None  # many()'s threads and their count

    @property
    def model(self) -> AttentionModel:
        """The model itself: a light model's (:class:`~attnviz.runtime.light_model.LightModel`) opened here, on
        first use, where a batch needs more than its kept statistics session (maps, a fallback)."""
        if self._model is None:
            assert self._light is not None
            self._model, self._light = self._light.opened(), None
        return self._model

    @property
    def _desc(self) -> AttentionModel | LightModel:
        """What describes the model (meta, kind, sites, inputs and roles): the light model while there is one."""
        return self._light if self._light is not None else self.model

    @property
    def meta(self) -> dict:
        return self._desc.meta

    def _build(self) -> InGraphReducer | bool:
        """The statistics session's reducer (False: none for these groups): a light model's kept one, else built
        on the model (opened now where it was light and nothing is kept for these sites)."""
        from attnviz.corpus.graph_reduce import InGraphReducer

        if self._light is not None:
            kept = InGraphReducer.kept(self._light, self.groups)
            if kept is not None:
                return kept
        return InGraphReducer.build(self.model, self.groups) or False

    def prepare(self) -> None:
        """Build the statistics session now rather than on the first batch (a worker calls this while it waits
        for work: on a GPU, creating the second session is a large part of a short run's start-up)."""
        # text only: pairs reduce maps, and an image corpus's first batch needs the probe's maps session
        if self.in_graph is None and self.kind in ("encoder", "decoder"):
            self.in_graph = self._build()

    def adopt(self, groups: Sequence[HeadGroup], kind: str | None = None) -> None:
        """The head groups (and the model's kind: a probe may find a decoder where the graph said encoder) that
        the driver's probe found, for a reducer opened without its own probe or with heads it could not count."""
        from attnviz.corpus.graph_reduce import InGraphReducer

        groups = list(groups)
        if isinstance(self.in_graph, InGraphReducer):
            if {g.site for g in groups} == {g.site for g in self.groups}:
                self.in_graph.groups = groups
            else:  # other sites than the session was built for: built again on the next batch
                self.in_graph = None
        self.groups, self.heads_known = groups, True
        self.kind = kind or self.kind

    def feeds(self, spec: BatchSpec):
        return image_feeds(self.model, spec, self.image_spec) if spec.images else text_feeds(self._desc, spec)

    def __call__(self, spec: BatchSpec) -> Partial:
        # the pair and speech batches' modules load where such a batch runs: the driver imports this module (its
        # Accumulator) for a text or image corpus too
        from attnviz.corpus.audio_items import AudioSpec
        from attnviz.corpus.pairs import PairSpec

        if isinstance(spec, PairSpec):
            return self._pair(spec)
        if isinstance(spec, AudioSpec):
            return self._audio(spec)
        if spec.images and self.model.frames is not None:
            return self._tower(spec)
        feeds, lengths, special = self.feeds(spec)
        part = self._in_graph(spec, feeds, lengths, special)
        if part is not None:
            return part
        r = self.model.run(feeds, mode="dense")  # maps are reduced here and dropped with the batch
        maps = [m.array() for m in r.maps]
        if lengths is None:  # images: every position is real; the leading non-patch tokens (CLS) are special
            from attnviz.runtime.model import grid_for

            t = maps[self.groups[0].site].shape[-1]
            lengths = np.full(spec.size, t, np.int64)
            grid = grid_for(self.model, t)
            special = np.broadcast_to(np.arange(t) < (grid.offset if grid else 1), (spec.size, t))
            self.image_axis = (t, special[0])
        stack = self.groups[0].stack  # one stack: encoder, decoder (causal) or a vision encoder
        axes = {stack: Axis(lengths, special, self.kind == "decoder")}
        return reduce_maps(maps, self.groups, axes, spec.items, self.k, spec.batch_id)

    def many(self, specs: list[BatchSpec], depth: int = 1) -> list[Partial]:
        """The partials of several batches, in order.  With the statistics session, up to ``depth`` later batches
        run in onnxruntime (which releases the GIL) on other threads while this one folds batch n: on a GPU the
        numpy after each run then no longer leaves the device idle, and with ``depth`` > 1 several runs share the
        one session (onnxruntime's ``run`` is thread-safe; each CUDA run gets its own stream) where the process
        layout gave each its own process and session (engines.LAYOUTS).  Anything else goes batch by batch."""
        from collections import deque
        from concurrent.futures import wait

        from attnviz.corpus.graph_reduce import InGraphReducer, NotInGraph, sessions_forced
        from attnviz.corpus.pairs import PairSpec

        if self.in_graph is None:
            self.prepare()
        red = self.in_graph
        if (
            len(specs) < 2
            or not isinstance(red, InGraphReducer)
            or any(isinstance(s, PairSpec) or s.images for s in specs)
        ):
            return [self(s) for s in specs]
        causal = self.kind == "decoder"

        # (one session unless ATTNVIZ_CORPUS_SESSIONS asks for more: InGraphReducer.sessions)
        own = red.sessions(min(sessions_forced(), depth)) if depth > 1 else [red.sess]
        turn = itertools.count()

        def launch(spec: BatchSpec, sess):
            feeds, lengths, special = self.feeds(spec)
            lengths = np.asarray(lengths, np.int64)
            return lengths, special, red.run(feeds, lengths, special, causal, sess)

        def submit(spec: BatchSpec):
            return ex.submit(launch, spec, own[next(turn) % len(own)])

        out: list[Partial] = []
        ex = self._runner(max(1, depth))
        ahead = iter(specs)
        pending = deque(submit(s) for s in itertools.islice(ahead, depth))
        for i, spec in enumerate(specs):
            try:
                lengths, special, ran = pending.popleft().result()
            except NotInGraph:  # as __call__: this model stays on the maps path from here on
                self.in_graph = False
                for f in pending:
                    f.cancel()
                wait(pending)  # the runs already started end first; their results go unused
                return out + [self(s) for s in specs[i:]]
            nxt = next(ahead, None)
            if nxt is not None:
                pending.append(submit(nxt))
            out.append(red.partial(ran, lengths, special, causal, spec.items, self.k, spec.batch_id))
        return out

    def _runner(self, depth: int) -> ThreadPoolExecutor:
        """:meth:`many`'s threads, kept from one call to the next (a worker's tasks): onnxruntime's CUDA provider
        gives each thread that runs a session its own cuBLAS and cuDNN handles on its first run."""
        from concurrent.futures import ThreadPoolExecutor

        if self._runs is None or self._runs[0] != depth:
            if self._runs is not None:
                self._runs[1].shutdown()
            self._runs = (depth, ThreadPoolExecutor(depth, thread_name_prefix="attnviz-run"))
        return self._runs[1]

    def _pair(self, spec: PairSpec) -> Partial:
        """Encoder-decoder: encoder self sites over the source, decoder self (causal) and cross sites over the target."""
        from attnviz.corpus.pairs import decoder_start, generate_rows, pair_feeds, set_decoder_rows

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
        if spec.gold is not None:
            from attnviz.corpus import gold

            nh = sum(g.heads for g in self.groups)
            per_item = gold.counts(maps, self.groups, spec.gold, spec.lengths, spec.dec_lengths, nh)
            part.gold = per_item.sum(0)
            part.gold_top_value, part.gold_top_item = gold.worst_items(per_item, spec.items, nh, self.k)
        if gen:
            assert tok is not None  # set_decoder_rows read it already (for the type checker)
            named = set(np.unique(part.top_item).tolist())
            part.generated = {int(i): [tok.label(t) for t in g] for i, g in zip(spec.items, gen) if int(i) in named}
        return part

    def _tower(self, spec: BatchSpec) -> Partial:
        """A VLM's vision file alone: its images through the family's processor, each frame's map reduced by
        itself (corpus/tower.py says why not over the block-diagonal map the view draws)."""
        from attnviz.corpus.tower import reduce_tower, tower_feeds

        frames = self.model.frames
        assert frames is not None and self.image_spec is not None  # (for the type checker: __call__ checked)
        feeds, counts, splits = tower_feeds(self.model, spec.images, self.image_spec)
        maps = [m.array() for m in self.model.run(feeds, mode="dense").maps]
        part = reduce_tower(maps, self.groups, counts, spec.items, self.k, spec.batch_id)
        per = int(maps[self.groups[0].site].shape[-1])
        grid = frames.family.vision_grid(per) if frames.family is not None else None
        rows, cols = (grid.rows, grid.cols) if grid is not None and grid.n == per else (1, per)
        named = set(part.top_item.ravel().tolist())
        part.frames = {
            int(i): (n, rows, cols, s.rows, s.cols) for i, n, s in zip(spec.items, counts, splits) if int(i) in named
        }
        return part

    def _audio(self, spec: AudioSpec) -> Partial:
        """A recording (``--audio-dir``): encoder self over its frames, decoder self (causal) and cross over the
        decoder's rows, plus its boundary counts and words (corpus/audio_items.py)."""
        from attnviz.corpus.audio_items import run_recording

        ran = run_recording(self.model, self.groups, spec)
        axes = {"encoder": Axis(*ran.encoder), "decoder": Axis(*ran.decoder, causal=True)}
        part = reduce_maps(ran.maps, self.groups, axes, spec.items, self.k, spec.batch_id)
        part.audio, part.words = ran.counts, {spec.items[0]: ran.words}
        return part

    def _in_graph(self, spec: BatchSpec, feeds, lengths, special) -> Partial | None:
        """The batch reduced by the statistics session, or None where it cannot be (then maps are reduced)."""
        from attnviz.corpus.graph_reduce import InGraphReducer, NotInGraph

        if lengths is None and self.image_axis is not None:  # images: every batch has the first batch's tokens
            t, sp = self.image_axis
            lengths, special = np.full(spec.size, t, np.int64), np.broadcast_to(sp, (spec.size, t))
        if self.in_graph is False or lengths is None:
            return None
        if self.in_graph is None:
            self.in_graph = self._build()
        if not isinstance(self.in_graph, InGraphReducer):
            return None
        try:
            return self.in_graph(feeds, lengths, special, self.kind == "decoder", spec.items, self.k, spec.batch_id)
        except NotInGraph:
            self.in_graph = False  # e.g. maps that are not T×T for these feeds: this model stays on the maps path
            return None


def combine(parts: list[Partial], k: int) -> list[Partial]:
    """A worker's task of consecutive batches as ONE partial: their top lists merged here (exactly as the driver's
    :meth:`Accumulator.fold` merges them: each row's ``k`` best by value, ties to the lower item id — an order that
    does not depend on how the batches are grouped), their counts summed (integers), and each batch's ``sums`` kept
    for the driver to add one by one.  A shared worker's 32 partials a task were ~4 MB pickled, sent while the
    driver folded the task before (~18 ms between two tasks on an H100), and 32 folds in the driver; now ~0.3 MB
    and one fold: the gap between tasks 17-19 ms -> 5 ms on the CPU, the H100's whole command unchanged within its
    noise (bench/RESULTS.md, session 19).  Partials that carry more than statistics (generated tokens, gold
    links, audio, words, frames) stay as they are."""
    if len(parts) < 2 or not all(_plain_partial(p) for p in parts):
        return parts
    acc = Accumulator(parts[0].sums.shape[0], k)
    acc.next_batch = parts[0].batch_id
    if not _fold_at_once(acc, parts):
        for p in parts:
            acc.fold(p)
    return [
        Partial(
            parts[0].batch_id,
            acc.items,
            acc.tokens,
            acc.sums,
            acc.counts,
            acc.top_value,
            acc.top_item,
            acc.top_row,
            acc.top_col,
            batches=len(parts),
            batch_sums=np.stack([p.sums for p in parts]),
        )
    ]


_TOPS = ("top_value", "top_item", "top_row", "top_col")


def _fold_at_once(acc: Accumulator, parts: list[Partial]) -> bool:
    """``acc.fold`` of each of ``parts`` in turn, made at once where it can be (False: nothing done; an empty
    ``acc``, plain partials of k candidates a list): the sums and counts added one partial after another as the
    folds add them, and each (statistic, head) row's top list ranked once over ``acc``'s empty slots and every
    partial's candidates side by side, by the folds' order (value high to low, ties to the lower item id, an
    empty slot's id after every item's, NaN last: :func:`~attnviz.corpus.fold.ranked_fast`, the rows it does not
    settle lexsorted).  The k best of all of them are what the folds keep one merge after another (an order of
    whole rows, and no (value, item) twice: the batches' items differ), so the partial is the same bytes; a
    task's 21 merges were ~0.15 ms a batch of 32 on this CPU, at once ~0.05 (bench/RESULTS.md, session 24,
    fold24)."""
    from attnviz.corpus.fold import ranked_fast

    first = acc.next_batch
    if (
        acc.k < 1
        or acc.items
        or any(
            p.batch_id != first + i
            or p.batch_sums is not None
            or p.sums.shape != acc.sums.shape
            or p.top_value.shape != acc.top_value.shape  # (a batch of fewer items than k: the folds)
            or any(getattr(p, f).dtype != getattr(acc, f).dtype for f in _TOPS)
            for i, p in enumerate(parts)
        )
    ):
        return False  # (the folds one by one: their checks name what is wrong)
    fields = _TOPS
    # [batches + 1, S, NH, k]: the empty slots, then each partial's list (stacked whole: a concatenation along
    # the last axis copied 5 values at a time, ~0.1 ms an array)
    s, nh, k = acc.top_value.shape
    m = len(parts) + 1
    r, c = s * nh, m * k

    def stacked_(f: str, dtype) -> np.ndarray:  # (the Accumulator's dtypes)
        return np.stack([getattr(acc, f)] + [getattr(p, f) for p in parts], out=_scratch(f, (m, s, nh, k), dtype))

    value = stacked_("top_value", np.float64)
    # the folds' key, row by row: -value, each row's candidates side by side ([S·NH, (batches + 1)·k])
    key = np.negative(value.transpose(1, 2, 0, 3), out=_scratch("key", (s, nh, m, k), np.float64))
    key = key.reshape(r, c)
    order, ok = ranked_fast(key, k, _scratch("packed", (r, c), np.int64))
    rest = ~ok
    if np.count_nonzero(rest) * 8 > r:
        # values that repeat from batch to batch (duplicate lines; bench/gpu/corpus_gil.py --null's outputs, the
        # same each batch): a lexsort of many whole rows of every candidate costs more than the folds (~12 µs a
        # row of 165: 10 ms a task where the folds took 5), which sort only the rows a batch enters
        return False
    stacked = [value] + [stacked_(f, np.int64) for f in fields[1:]]
    if rest.any():  # (a tie, a NaN, two zeros: lexsorted whole by item id, an empty slot's after every item's)
        item = stacked[1].transpose(1, 2, 0, 3).reshape(r, c)[rest]
        order[rest] = np.lexsort((np.where(item < 0, _NO_ITEM, item), key[rest]), axis=-1)[:, :k]
    # column j·k + slot of a row is stacked[j, that row, slot]: its flat place (j·S·NH + row)·k + slot
    j, slot = np.divmod(order, k)
    flat = (j * r + np.arange(r)[:, None]) * k + slot
    top = [a.take(flat).reshape(s, nh, k) for a in stacked]
    items: int = acc.items  # (0 here: the check above; typed so the sums below may grow it)
    tokens: int = acc.tokens
    sums, counts = acc.sums, acc.counts
    for p in parts:
        sums, counts, items, tokens = sums + p.sums, counts + p.counts, items + p.items, tokens + p.tokens
    acc.__dict__.update(
        sums=sums,
        counts=counts,
        items=items,
        tokens=tokens,
        top_value=top[0],
        top_item=top[1],
        top_row=top[2],
        top_col=top[3],
        next_batch=first + len(parts),
    )
    return True


_SCRATCH = threading.local()
SCRATCH_BYTES = 1 << 24  # the largest array kept for the next task (MiniLM, 32 batches of 32: ~1 MB each)


def _scratch(name: str, shape: tuple[int, ...], dtype) -> np.ndarray:
    """An array of ``shape`` in memory this thread keeps for ``name`` between tasks (its values undefined): the
    task's at-once fold made its ~1 MB arrays fresh each task, which glibc handed back to the kernel at each free,
    and the next task's first writes paid the page faults: ~1.7 ms of its ~2.4 (bench/RESULTS.md, session 24,
    fold24).  Above :data:`SCRATCH_BYTES` a fresh array (not held)."""
    size = math.prod(shape) * np.dtype(dtype).itemsize
    if size > SCRATCH_BYTES:
        return np.empty(shape, dtype)
    held = _SCRATCH.__dict__.setdefault("bufs", {})
    buf = held.get(name)
    if buf is None or buf.size < size:
        buf = held[name] = np.empty(size, np.uint8)
    return buf[:size].view(dtype).reshape(shape)


def _plain_partial(p: object) -> bool:
    return (
        type(p) is Partial
        and p.batches == 1
        and not (p.generated or p.words or p.frames)
        and p.gold is None
        and p.gold_top_value is None
        and p.audio is None
    )


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
        self.frames: dict[int, FrameShape] = {}  # a VLM's tower alone: Partial.frames of the top lists
        self.gold: np.ndarray | None = None  # --gold-column: link counts (corpus/gold.py), once a batch brings them
        self.gold_top_value: np.ndarray | None = None  # and per head the items it aligns worst (AER, Item.index)
        self.gold_top_item: np.ndarray | None = None
        self.audio: np.ndarray | None = None  # --audio-dir with --gold-dir: boundary counts (corpus/audio_items.py)

    def fold(self, p: Partial) -> None:
        if p.batch_id != self.next_batch:
            raise AttnvizError(f"internal: batch {p.batch_id} arrived while {self.next_batch} was expected")
        if p.sums.shape != self.sums.shape:
            raise AttnvizError(f"internal: a worker saw {p.sums.shape[0]} heads, the driver {self.sums.shape[0]}")
        top_value, top_item, top_row, top_col = self._merged(p)
        generated = self.generated
        if generated or p.generated:  # (an encoder's or a decoder's batches generate nothing: no set of the ids)
            named = set(top_item.ravel().tolist())  # not np.unique: it sorts, and imports numpy.ma (~5 ms) once
            generated = {n: g for n, g in (self.generated | p.generated).items() if n in named}
        frames = self.frames
        if frames or p.frames:
            named = set(top_item.ravel().tolist())
            frames = {n: f for n, f in (self.frames | p.frames).items() if n in named}
        # the new state is built aside and swapped in by one dict update: a Ctrl-C (delivered between bytecodes)
        # then finds the batch either wholly folded or not at all, so the checkpoint never counts it twice
        gold = self.gold if p.gold is None else p.gold if self.gold is None else self.gold + p.gold
        worst = self._worst(p)
        audio = self.audio if p.audio is None else p.audio if self.audio is None else self.audio + p.audio
        self.__dict__.update(
            audio=audio,
            gold=gold,
            gold_top_value=worst[0],
            gold_top_item=worst[1],
            generated=generated,
            frames=frames,
            sums=self._summed(p),
            counts=self.counts + p.counts,
            items=self.items + p.items,
            tokens=self.tokens + p.tokens,
            top_value=top_value,
            top_item=top_item,
            top_row=top_row,
            top_col=top_col,
            next_batch=self.next_batch + p.batches,
        )

    def _summed(self, p: Partial) -> np.ndarray:
        """The sums with ``p``'s added batch by batch (a combined task's too: the same float64 additions, in the same
        order, whatever the task size)."""
        if p.batch_sums is None:
            return self.sums + p.sums
        sums = self.sums
        for s in p.batch_sums:
            sums = sums + s
        return sums

    def _merged(self, p: Partial) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The top lists with ``p``'s candidates merged in: each (statistic, head) row's ``k`` best by value, ties to
        the lower item id, empty slots (item -1) last -- new arrays, the accumulator's own left as they are.

        Only the rows a candidate may enter are sorted: where every candidate of ``p`` is strictly below the row's
        k-th value (a tie might enter by its item id; a NaN is never below), the row stays as it is, already in
        that order.  After the first batches few rows change (~5/b of them at batch b), and sorting every row was
        most of a fold (0.5 ms a batch: 0.16 s of a 10k run's driver)."""
        old = (self.top_value, self.top_item, self.top_row, self.top_col)
        new = (p.top_value, p.top_item, p.top_row, p.top_col)
        if self.k == 0 or p.top_value.shape[-1] == 0:
            rows: tuple | slice = slice(None)
        else:
            enters = ~np.all(p.top_value < self.top_value[..., -1:], axis=-1)  # [S, NH]
            if not enters.any():
                return old
            rows = slice(None) if enters.all() else np.nonzero(enters)
        both = [np.concatenate([a[rows], b[rows]], -1) for a, b in zip(old, new)]
        v, i = both[0], both[1]
        order = np.lexsort((np.where(i < 0, _NO_ITEM, i), -v), axis=-1)[..., : self.k]
        # each row's picks as flat places of the (contiguous) candidates: one index for the four arrays, where
        # take_along_axis made its broadcast index four times (~0.04 ms each: most of a fold, 720 rows of 10)
        order += np.arange(0, v.size, v.shape[-1]).reshape(*v.shape[:-1], 1)
        picked = [a.take(order) for a in both]
        if isinstance(rows, slice):
            return picked[0], picked[1], picked[2], picked[3]
        out = [a.copy() for a in old]
        for a, b in zip(out, picked):
            a[rows] = b
        return out[0], out[1], out[2], out[3]

    def _worst(self, p: Partial) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The gold examples with ``p``'s folded in (the same ranking as in the batch: engines agree)."""
        if p.gold_top_value is None or p.gold_top_item is None:
            return self.gold_top_value, self.gold_top_item
        if self.gold_top_value is None or self.gold_top_item is None:
            return p.gold_top_value, p.gold_top_item
        from attnviz.corpus.gold import top_k

        v = np.concatenate([self.gold_top_value, p.gold_top_value], -1)
        i = np.concatenate([self.gold_top_item, p.gold_top_item], -1)
        return top_k(v, i, self.k)

    def means(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.counts > 0, self.sums / np.maximum(self.counts, 1), np.nan)

    # -- checkpoint ------------------------------------------------------------------
    FIELDS = ("sums", "counts", "top_value", "top_item", "top_row", "top_col")
    GOLD_FIELDS = ("gold", "gold_top_value", "gold_top_item", "audio")  # only with --gold-column / --gold-dir

    def save(self, path: Path, fingerprint: str, settings: dict | None = None) -> None:
        """``settings``: the run's settings by name (corpus/resume_settings.py), for a refused resume to name."""
        from attnviz.corpus import resume_settings

        # a VLM's tower alone: the example images' frames (a run without them saves none, as before)
        frames: dict[str, Any] = {"frames": np.array(json.dumps(self.frames))} if self.frames else {}
        # atomic: an interrupt mid-write leaves the previous checkpoint intact
        with (
            atomic_path(path, "--out") as tmp,
            open(tmp, "wb") as f,
        ):  # a file object: np.savez would append .npz to a bare name
            np.savez(
                f,
                fingerprint=np.array(fingerprint),
                next_batch=self.next_batch,
                items=self.items,
                tokens=self.tokens,
                generated=np.array(json.dumps(self.generated)),
                **{n: getattr(self, n) for n in (*self.FIELDS, *self.GOLD_FIELDS) if getattr(self, n) is not None},
                **frames,
                **resume_settings.saved(settings),
            )

    @classmethod
    def load(cls, path: Path, fingerprint: str, nh: int, k: int) -> Accumulator | None:
        if not os.path.lexists(path):
            return None
        f = open_regular(path, "checkpoint")  # a FIFO or device named checkpoint.npz is refused, never waited on
        try:
            with f, np.load(f) as z:
                if str(z["fingerprint"]) != fingerprint:
                    return None
                acc = cls(nh, k)
                acc.next_batch, acc.items, acc.tokens = int(z["next_batch"]), int(z["items"]), int(z["tokens"])
                for n in cls.FIELDS:
                    setattr(acc, n, z[n])
                for n in cls.GOLD_FIELDS:  # a run without gold alignments saves none
                    if n in z.files:
                        setattr(acc, n, z[n])
                if "generated" in z.files:  # checkpoints from before generation have none
                    acc.generated = {int(i): g for i, g in parse_json(str(z["generated"]), f"{path} generated").items()}
                if "frames" in z.files:  # only a VLM's tower alone keeps them
                    kept = parse_json(str(z["frames"]), f"{path} frames")
                    acc.frames = {int(i): _frame_shape(f) for i, f in kept.items()}
        except Exception as e:  # truncated or not ours
            raise AttnvizError(
                f"{path}: unreadable checkpoint ({checkpoint_problem(e)}); delete it to start over"
            ) from None
        return acc


def _frame_shape(f: list) -> FrameShape:
    """A checkpoint's ``Partial.frames`` entry; one from before the split was kept has three (its tiles' places not
    known: 0, 0)."""
    rows, cols = (int(f[3]), int(f[4])) if len(f) >= 5 else (0, 0)
    return int(f[0]), int(f[1]), int(f[2]), rows, cols
