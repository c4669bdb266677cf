"""The corpus reduction with the row sums computed inside onnxruntime (runtime/statgraph.py).

Only ``[B, H, T, k]`` sums and argmax keys leave the session for the sites it supports; other sites' maps come
out as before and take the numpy path (``row_stats``).  Both end in the same per-head sums and top-k as
:func:`attnviz.corpus.reduce.reduce_maps`, so a partial does not depend on which path made it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from attnviz.core.row_sums import stats_from_sums
from attnviz.core.stats import ROW_STATS, row_stats

if TYPE_CHECKING:
    from attnviz.corpus.reduce import HeadGroup, Partial
    from attnviz.runtime.model import AttentionModel


# per head group: (group, values, valid, key_of) with row_stats' values and valid masks and
# key_of(stat, rows [B, H]) -> the key each chosen row looked at [B, H]
GroupRows = tuple["HeadGroup", dict[str, np.ndarray], dict[str, np.ndarray], Callable[[str, np.ndarray], np.ndarray]]


class NotInGraph(Exception):
    """This batch cannot use the statistics session (the caller reduces it from maps and stops trying)."""


class InGraphReducer:
    """One session of the model with statistic nodes after each supported self-attention site."""

    def __init__(self, model: AttentionModel, groups: list[HeadGroup]):
        from attnviz.runtime import statgraph as sg
        from attnviz.runtime.host import make_session
        from attnviz.runtime.model import _serialize

        self.model, self.groups = model, groups
        sites = model._sites
        m, self.exposed, self.outputs = sg.stats_model(model.graph, sites, {g.site for g in groups})
        self.sess, _ = make_session(
            _serialize(m),
            model.requested_provider,
            model.threads,
            external_dir=model.external_dir,
            label=model.path.name,
        )
        fallback = [i for i in range(len(sites)) if i not in self.outputs]
        self.fetch = [n for o in self.outputs.values() for n in (o.sums, o.fixed, o.argmax)]
        for i in fallback:
            ex = self.exposed.site_extra[i]
            for n in [self.exposed.outputs[i], *([ex["mask_index"]] if "mask_index" in ex else [])]:
                if n not in self.fetch and any(o.name == n for o in m.graph.output):
                    self.fetch.append(n)

    @classmethod
    def build(cls, model: AttentionModel, groups: list[HeadGroup]) -> InGraphReducer | None:
        """None when no group can use it, or when a site's maps do not map one-to-one onto sites (a Loop body
        gives one map per iteration, an If branch may give none, an explicit softmax axis may be refused)."""
        from attnviz.runtime import statgraph as sg

        sites = model._sites
        if any(s.g.path or s.loop or "softmax_axis" in s.extra for s in sites):
            return None
        if not any(sg.supported(model.graph, sites[g.site]) for g in groups):
            return None
        red = cls(model, groups)
        model._sessions.pop("dense", None)  # the probe's session: this one replaces it (one copy of the weights)
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
        rows = self.rows(feeds, lengths, special, causal)
        return fold_rows(rows, items, k, batch_id, int(np.asarray(lengths).sum()))

    def rows(
        self, feeds: dict[str, np.ndarray], lengths: np.ndarray, special: np.ndarray | None, causal: bool
    ) -> list[GroupRows]:
        """Per group ``(group, values, valid, key_of)``: ``row_stats``' values and valid masks, and
        ``key_of(stat, rows [B, H]) -> keys [B, H]`` (the key each chosen row looked at, as ``_cols``)."""
        from attnviz.corpus.reduce import _cols
        from attnviz.runtime import statgraph as sg
        from attnviz.runtime.model import _run_bound

        lengths = np.asarray(lengths, np.int64)
        t = next(a.shape[-1] for a in feeds.values() if a.ndim == 2) if special is None else special.shape[1]
        extra, positions = sg.stat_feeds(lengths, special, t)
        try:
            got = dict(zip(self.fetch, _run_bound(self.sess, self.fetch, {**feeds, **extra})))
        except Exception as e:  # e.g. a site whose map is not T×T for these feeds: the maps path still works
            raise NotInGraph(str(e)) from None
        batch = len(lengths)
        real = np.arange(t)[None, :] < lengths[:, None]
        sp = np.zeros_like(real) if special is None else np.asarray(special, bool)[:, :t]
        per_group: list[GroupRows] = []
        for g in self.groups:
            out = self.outputs.get(g.site)
            if out is not None:
                rs = sg.row_sums(got[out.sums], got[out.fixed], got[out.argmax], extra, positions)
                if rs.sums["s"].shape != (batch, g.heads, t):
                    raise NotInGraph(f"site {g.site}: statistics of shape {rs.sums['s'].shape}")
                values, valid = stats_from_sums(rs, lengths, causal)
                per_group.append((g, values, valid, rs.key_of))
            else:
                s = self.model._sites[g.site]
                p = self.model._site_map(s, self.exposed.site_extra[g.site], got, batch, "dense").array()
                values, valid = row_stats(p, lengths, sp, causal)
                per_group.append((g, values, valid, _map_cols(p, real, sp, _cols)))
        return per_group


def _map_cols(p, real, sp, cols) -> Callable[[str, np.ndarray], np.ndarray]:
    return lambda stat, rows: cols(stat, p, rows, real, sp)


ROW_TIE = 1e-6  # relative: rows scoring this close to an item's best row are tied


def _first_top_row(v: np.ndarray) -> np.ndarray:
    """The first row scoring within ``ROW_TIE`` of the best one, per (item, head) of ``v [B, H, T]``.

    onnxruntime's reductions group a row's additions by where the row lies in the batch, so two equal rows
    (the same token twice) or the same item in another engine's batch differ in the last bit; a plain argmax
    would then pick the example's row by float noise."""
    best = v.max(-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        near = v >= best - ROW_TIE * np.maximum(1.0, np.abs(best))
    return near.argmax(-1)


def fold_rows(per_group: list[GroupRows], items: list[int], k: int, batch_id: int, tokens: int) -> Partial:
    """Per-head sums and top-k candidates from per-row ``(group, values, valid, key_of)``, as ``reduce_maps``."""
    from attnviz.corpus.reduce import Partial

    S = len(ROW_STATS)
    nh = sum(g.heads for g, *_ in per_group)
    b = len(items)
    kb = min(k, b)
    sums = np.zeros((nh, S))
    counts = np.zeros((nh, S), np.int64)
    tv = np.zeros((S, nh, kb))
    ti = np.zeros((S, nh, kb), np.int64)
    tr = np.zeros((S, nh, kb), np.int64)
    tc = np.zeros((S, nh, kb), np.int64)
    item_ids = np.asarray(items, np.int64)
    for g, values, valid, key_of in per_group:
        hs = slice(g.offset, g.offset + g.heads)
        for s, name in enumerate(ROW_STATS):
            v, ok = values[name], valid[name]
            n = ok.sum(1)  # [B]
            vm = np.where(ok[:, None, :], v, 0.0)
            sums[hs, s] = vm.sum((0, 2))
            counts[hs, s] = int(n.sum())
            with np.errstate(invalid="ignore", divide="ignore"):
                per_item = np.where(n[:, None] > 0, vm.sum(2) / np.maximum(n, 1)[:, None], -np.inf)  # [B, H]
            rows = _first_top_row(np.where(ok[:, None, :], v, -np.inf))  # [B, H]
            cols = key_of(name, rows)
            # highest per-item mean first; ties go to the earlier item (deterministic across engines)
            order = np.lexsort((np.broadcast_to(item_ids[:, None], per_item.shape), -per_item), axis=0)[:kb]  # [kb, H]
            hh = np.arange(g.heads)[None, :]
            tv[s, hs] = per_item[order, hh].T
            ti[s, hs] = item_ids[order].T
            tr[s, hs] = rows[order, hh].T
            tc[s, hs] = cols[order, hh].T
    return Partial(batch_id, b, tokens, sums, counts, tv, ti, tr, tc)
