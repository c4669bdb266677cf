"""The corpus reduction with the statistics computed inside onnxruntime (runtime/statgraph.py).

For the sites it supports only ``[B, H, S]`` per-item sums, best rows and keys leave the session; other sites'
maps come out as before and take the numpy path (``row_stats``).  Both end in the same fold as
:func:`attnviz.corpus.reduce.reduce_maps` (:func:`attnviz.corpus.fold.fold_items`), so a partial does not depend
on which path made it (to float rounding: the graph sums a row's weights in another order).

Only the runtime's public surface is used: the model's graph and site records, and a session of the edited graph
from :meth:`~attnviz.runtime.model.AttentionModel.extra_session` (tests/test_layering.py keeps private runtime
names out of corpus); or, on a second command, the session an earlier command's worker kept, made without the
model (:meth:`InGraphReducer.kept`, runtime/light_model.py).  onnx is imported only where a graph is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from attnviz.core.row_sums import ItemStats
from attnviz.core.stats import row_stats
from attnviz.corpus.fold import HeadGroup, Partial, fold_items, fold_stats, heads_of, key_columns, signs
from attnviz.runtime import statfeeds as sf

if TYPE_CHECKING:
    from collections.abc import Callable

    from attnviz.runtime.graph import Exposed
    from attnviz.runtime.light_model import LightModel
    from attnviz.runtime.model import AttentionModel


SESSIONS_ENV = "ATTNVIZ_CORPUS_SESSIONS"  # statistics sessions a shared worker runs its batches on (default 1)


def sessions_forced() -> int:
    """:data:`SESSIONS_ENV`: sessions of their own for the runs in flight in one process (bench/corpus_ab.py
    compares them on a GPU; 1, the default, is the layout measured so far)."""
    from attnviz.core.limits import env_count

    return env_count(SESSIONS_ENV, "the sessions") or 1


class NotInGraph(Exception):
    """This batch cannot use the statistics session (the caller reduces it from maps and stops trying)."""


class InGraphReducer:
    """One session of the model with statistic nodes after each supported self-attention site.

    ``rows``: the session also hands out each row's values and keys (``[B, H, T, S]``; tests compare them).
    ``join``: one set of statistic nodes for all sites (see ``statgraph.stats_model``); None: where the model's
    session runs on CUDA."""

    def __init__(self, model: AttentionModel, groups: list[HeadGroup], rows: bool = False, join: bool | None = None):
        # (the graph's builders import onnx: here, not at the top, so that a worker whose session is read back
        # whole from the cache, InGraphReducer.kept, never imports them)
        from attnviz.runtime import light_model
        from attnviz.runtime import statgraph_kept as sgk

        self.model: AttentionModel | None = model
        self.groups = groups
        sites = model.graph_sites
        if join is None:
            # the probe's session says where it ran (no session is made only to ask)
            ran_on = model.open_provider
            join = ran_on.startswith("CUDA") if ran_on is not None else model.requested_provider == "cuda"
        self.joined = join
        wanted = {g.site for g in groups}
        # built by an earlier command's worker where it can be (runtime/statgraph_kept.py: ~0.02 s CPU a worker)
        m, exposed, self.outputs = sgk.stats_model(model, wanted, rows, join)
        self.exposed: Exposed | None = exposed  # (None: a kept session, which exposes no map)
        # the key names everything the edited graph depends on: the same key is the same session
        key = f"corpus-stats sites={sorted(wanted)} rows={rows} join={join}"
        self.sess = model.extra_session(m, key, keep=True)
        # another session of the same graph (:meth:`sessions`): a key of its own is a session of its own
        self.remake: Callable[[int], object] | None = lambda n: model.extra_session(m, f"{key} copy {n}", keep=True)
        self.copies: list = []
        fallback = [i for i in range(len(sites)) if i not in self.outputs]
        self.fetch = ([sf.SUMS, sf.PICKS] + ([sf.VALUES, sf.KEYS] if rows else [])) if self.outputs else []
        if self.outputs and any(o.name == sf.RANKS for o in m.graph.output):
            self.fetch.insert(2, sf.RANKS)
        for i in fallback:
            ex = exposed.site_extra[i]
            for n in [exposed.outputs[i], *([ex["mask_index"]] if "mask_index" in ex else [])]:
                if n not in self.fetch and any(o.name == n for o in m.graph.output):
                    self.fetch.append(n)
        if self.small:  # the next command's worker makes this session without the model
            light_model.keep_stats(model, wanted, rows, join, m, self.sess, self.outputs)

    @classmethod
    def kept(cls, model: LightModel, groups: list[HeadGroup]) -> InGraphReducer | None:
        """The reducer an earlier command's worker built for these sites (runtime/light_model.py), its session
        made from the kept graph without opening the model; None where nothing whole is kept for them (then
        :meth:`build` on the model opened as before).  Its graph reduces every site of ``groups``: no map leaves it."""
        join = model.device == "cuda"  # where its session will run (``auto``: where it landed before)
        found = model.stats_session({g.site for g in groups}, False, join)
        if found is None:
            return None
        red = cls.__new__(cls)
        red.model, red.groups, red.joined = None, groups, join
        red.sess, red.outputs = found

        wanted = frozenset(g.site for g in groups)

        def again(n: int):
            made = model.stats_session(set(wanted), False, join)  # made anew from the kept graph each call
            return made[0] if made is not None else None

        red.remake, red.copies = again, []
        red.exposed = None
        # (a graph kept by an older attnviz ranks nothing: its session has no RANKS, and the host ranks every row)
        red.fetch = [sf.SUMS, sf.PICKS, *[sf.RANKS] * (sf.RANKS in red.sess.output_names())]
        return red

    @property
    def small(self) -> bool:
        """Only the statistics leave the session (no map: a few hundred kB a batch at most)."""
        return self.fetch[:2] == [sf.SUMS, sf.PICKS] and set(self.fetch) <= {sf.SUMS, sf.PICKS, sf.RANKS}

    @classmethod
    def build(
        cls, model: AttentionModel, groups: list[HeadGroup], rows: bool = False, join: bool | None = None
    ) -> InGraphReducer | None:
        """None when no group can use it, or when a site's maps do not map one-to-one onto sites (a Loop body
        gives one map per iteration, an If branch may give none, an explicit softmax axis may be refused)."""
        from attnviz.runtime import statgraph as sg

        sites = model.graph_sites
        if any(s.g.path or s.loop or "softmax_axis" in s.extra for s in sites):
            return None
        if not any(sg.supported(model.graph, sites[g.site]) for g in groups):
            return None
        red = cls(model, groups, rows, join)
        model.close_session("dense")  # the probe's session: this one replaces it (one copy of the weights)
        return red

    def __call__(
        self,
        feeds: dict[str, np.ndarray],
        lengths: np.ndarray,
        special: np.ndarray | None,
        causal: bool,
        items: list[int],
        k: int,
        batch_id: int,
    ) -> Partial:
        lengths = np.asarray(lengths, np.int64)
        return self.partial(self.run(feeds, lengths, special, causal), lengths, special, causal, items, k, batch_id)

    def sessions(self, n: int) -> list:
        """``n`` sessions of this graph (this one first), the others made on first use and kept: runs from several
        threads on ONE CUDA session may share its stream, so that only their host work overlaps; sessions of
        their own (a stream each) may overlap on the device too.  Fewer where another cannot be made.  Only where
        asked for (``ATTNVIZ_CORPUS_SESSIONS``, engines.py): measured against one on a GPU first."""
        while 1 + len(self.copies) < n and self.remake is not None:
            more = self.remake(len(self.copies) + 1)
            if more is None:
                self.remake = None
                break
            self.copies.append(more)
        return [self.sess, *self.copies][: max(1, n)]

    def run(
        self,
        feeds: dict[str, np.ndarray],
        lengths: np.ndarray,
        special: np.ndarray | None,
        causal: bool,
        sess=None,
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray, int]:
        """The session's outputs by name, the statistics inputs it was fed, the special keys' positions, T.
        ``sess``: one of :meth:`sessions` (default this one's)."""
        t = next(a.shape[-1] for a in feeds.values() if a.ndim == 2) if special is None else special.shape[1]
        extra, positions = sf.stat_feeds(lengths, special, t, causal)
        try:
            on = sess or self.sess
            run = on.run_small if self.small else on.run  # (no map: a few hundred kB out)
            got = dict(zip(self.fetch, run(self.fetch, {**feeds, **extra})))
        except Exception as e:  # e.g. a site whose map is not T×T for these feeds: the maps path still works
            raise NotInGraph(str(e)) from None
        return got, extra, positions, t

    def items(
        self, feeds: dict[str, np.ndarray], lengths: np.ndarray, special: np.ndarray | None, causal: bool
    ) -> list[tuple[HeadGroup, ItemStats]]:
        """Per head group its :class:`ItemStats` for this batch (from the graph, or from its map)."""
        lengths = np.asarray(lengths, np.int64)
        return self.finish(self.run(feeds, lengths, special, causal), lengths, special, causal)

    def partial(
        self,
        ran: tuple,
        lengths: np.ndarray,
        special: np.ndarray | None,
        causal: bool,
        items: list[int],
        k: int,
        batch_id: int,
    ) -> Partial:
        """The batch's :class:`Partial` from what :meth:`run` returned: :meth:`finish` then ``fold_items``, or
        where the session reduced every group, the same fold on its outputs as they come (numpy only: it may
        overlap the next batch's run).  There the heads of all sites are one [B, NH, S] array already, and
        the keys are completed (special slots to positions, the fixed statistics' keys from their rows) for
        the chosen k entries of each (head, statistic) alone, not for every item: the same values, at ~0.35 ms
        of host CPU a batch of 32 where finish then fold_items took ~0.63 (MiniLM; bench/corpus_host_cost.py)."""
        lengths = np.asarray(lengths, np.int64)
        tokens = int(lengths.sum())
        got, extra, positions, _ = ran
        groups = sorted(self.groups, key=lambda g: g.offset)
        # the session's heads come site by site (self.outputs' order): the fold's are by offset
        if [g.site for g in groups] != list(self.outputs) or not self.outputs:  # (or a site left to its map)
            return fold_items(self.finish(ran, lengths, special, causal), items, k, batch_id, tokens)
        sums, picks = got[sf.SUMS], got[sf.PICKS]
        nh = heads_of(groups)
        if sums.shape[:2] != (len(lengths), nh):
            raise NotInGraph(f"statistics of shape {sums.shape}, expected {len(lengths)} x {nh} heads")
        keys = sf.picked_keys(picks, extra, positions)
        n = sf.counted(extra)[:, None]
        ranks = got.get(sf.RANKS)  # (the session's ranking of the fold's key: fold_stats checks it fits)
        return fold_stats(groups, sums, n, items, k, batch_id, tokens, keys, mult=sf.SIGN64, ranks=ranks)

    def finish(
        self, ran: tuple, lengths: np.ndarray, special: np.ndarray | None, causal: bool
    ) -> list[tuple[HeadGroup, ItemStats]]:
        """:meth:`items` from what :meth:`run` returned (numpy only: it may overlap the next batch's run)."""
        got, extra, positions, t = ran
        lengths = np.asarray(lengths, np.int64)
        batch = len(lengths)
        heads = {g.site: g.heads for g in self.groups}
        split = np.cumsum([0] + [heads[i] for i in self.outputs])
        joined = None
        if self.outputs:
            if got[sf.SUMS].shape[:2] != (batch, split[-1]):
                raise NotInGraph(f"statistics of shape {got[sf.SUMS].shape}, expected {batch} x {split[-1]} heads")
            joined = sf.item_stats(got[sf.SUMS], got[sf.PICKS], extra, positions)
        at = {i: slice(split[j], split[j + 1]) for j, i in enumerate(self.outputs)}
        out = []
        for g in self.groups:
            if joined is not None and g.site in at:
                h = at[g.site]
                out.append((g, ItemStats(joined.sums[:, h], joined.counts, joined.rows[:, h], joined.keys[:, h])))
                continue
            real = np.arange(t)[None, :] < lengths[:, None]
            sp = np.zeros_like(real) if special is None else np.asarray(special, bool)[:, :t]
            if self.model is None or self.exposed is None:  # a kept session reduces every site it was made for
                raise NotInGraph(f"site {g.site} is not reduced by the kept statistics session")
            p = self.model.dense_map(g.site, got, batch, self.exposed.site_extra[g.site])
            values, valid = row_stats(p, lengths, sp, causal)

            def key_of(name, rows, p=p, real=real, sp=sp):
                return key_columns(name, p, rows, real, sp)

            # the tie rule of the graph's sites, so that a model's partial does not depend on which sites it took
            out.append((g, ItemStats.from_rows(values, valid, key_of, tie=True, signs=signs(g.kind))))
        return out
