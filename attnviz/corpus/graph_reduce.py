"""The corpus reduction with the row sums computed inside onnxruntime (runtime/statgraph.py).

Only ``[B, H, T, k]`` sums and argmax keys leave the session for the sites it supports; other sites' maps come
out as before and take the numpy path (``row_stats``).  Both end in the same per-head sums and top-k as
:func:`attnviz.corpus.reduce.reduce_maps`, so a partial does not depend on which path made it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from attnviz.core.row_sums import FIXED_KEYS, RowSums, key_table, stats_from_sums
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
        return fold_blocks(
            self.blocks(feeds, lengths, special, causal), items, k, batch_id, int(np.asarray(lengths).sum())
        )

    def _run(
        self, feeds: dict[str, np.ndarray], lengths: np.ndarray, special: np.ndarray | None
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray, int]:
        from attnviz.runtime import statgraph as sg
        from attnviz.runtime.model import _run_bound

        t = next(a.shape[-1] for a in feeds.values() if a.ndim == 2) if special is None else special.shape[1]
        extra, positions = sg.stat_feeds(lengths, special, t)
        try:
            got = dict(zip(self.fetch, _run_bound(self.sess, self.fetch, {**feeds, **extra})))
        except Exception as e:  # e.g. a site whose map is not T×T for these feeds: the maps path still works
            raise NotInGraph(str(e)) from None
        return got, extra, positions, t

    def _site_sums(self, g: HeadGroup, got, extra, positions, batch: int, t: int) -> RowSums:
        from attnviz.runtime import statgraph as sg

        out = self.outputs[g.site]
        rs = sg.row_sums(got[out.sums], got[out.fixed], got[out.argmax], extra, positions)
        if rs.sums["s"].shape != (batch, g.heads, t):
            raise NotInGraph(f"site {g.site}: statistics of shape {rs.sums['s'].shape}")
        return rs

    def _map_rows(self, g: HeadGroup, got, lengths, special, causal: bool, batch: int, t: int) -> GroupRows:
        from attnviz.corpus.reduce import _cols

        real = np.arange(t)[None, :] < lengths[:, None]
        sp = np.zeros_like(real) if special is None else np.asarray(special, bool)[:, :t]
        s = self.model._sites[g.site]
        p = self.model._site_map(s, self.exposed.site_extra[g.site], got, batch, "dense").array()
        values, valid = row_stats(p, lengths, sp, causal)
        return (g, values, valid, _map_cols(p, real, sp, _cols))

    def rows(
        self, feeds: dict[str, np.ndarray], lengths: np.ndarray, special: np.ndarray | None, causal: bool
    ) -> list[GroupRows]:
        """Per group ``(group, values, valid, key_of)``: ``row_stats``' values and valid masks, and
        ``key_of(stat, rows [B, H]) -> keys [B, H]`` (the key each chosen row looked at, as ``_cols``)."""
        lengths = np.asarray(lengths, np.int64)
        got, extra, positions, t = self._run(feeds, lengths, special)
        batch = len(lengths)
        per_group: list[GroupRows] = []
        for g in self.groups:
            if g.site in self.outputs:
                rs = self._site_sums(g, got, extra, positions, batch, t)
                values, valid = stats_from_sums(rs, lengths, causal)
                per_group.append((g, values, valid, rs.key_of))
            else:
                per_group.append(self._map_rows(g, got, lengths, special, causal, batch, t))
        return per_group

    def blocks(
        self, feeds: dict[str, np.ndarray], lengths: np.ndarray, special: np.ndarray | None, causal: bool
    ) -> list[Block]:
        """What :meth:`rows` gives, as :class:`Block` s whose in-graph keys are read straight from their tables."""
        lengths = np.asarray(lengths, np.int64)
        got, extra, positions, t = self._run(feeds, lengths, special)
        batch = len(lengths)
        out: list[Block] = []
        for g in self.groups:
            if g.site in self.outputs:
                rs = self._site_sums(g, got, extra, positions, batch, t)
                values, valid = stats_from_sums(rs, lengths, causal)
                out.append(Block(g, values, valid, rs))
            else:
                out.append(_block(*self._map_rows(g, got, lengths, special, causal, batch, t)))
        return out


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


@dataclass(frozen=True)
class Block:
    """One head group's rows: per statistic, values ``[B, H, T]`` (float64) and valid ``[B, T]``; keys from its
    :class:`RowSums` (looked up directly) or any ``key_of(stat, rows [B, H])``.  Groups are not concatenated:
    measured, copying them side by side cost more than the Python calls it saved (bench/RESULTS.md, foldvec)."""

    group: HeadGroup
    values: dict[str, np.ndarray]
    valid: dict[str, np.ndarray]
    keys: RowSums | Callable[[str, np.ndarray], np.ndarray]


def _block(g: HeadGroup, values, valid, key_of) -> Block:
    owner = getattr(key_of, "__self__", None)  # RowSums.key_of: its tables can be read at the kept rows only
    return Block(g, values, valid, owner if isinstance(owner, RowSums) else key_of)


def fold_rows(per_group: list[GroupRows], items: list[int], k: int, batch_id: int, tokens: int) -> Partial:
    """Per-head sums and top-k candidates from per-row ``(group, values, valid, key_of)``, as ``reduce_maps``."""
    return fold_blocks([_block(*e) for e in per_group], items, k, batch_id, tokens)


def fold_blocks(blocks: list[Block], items: list[int], k: int, batch_id: int, tokens: int) -> Partial:
    """:func:`fold_rows` on blocks, in two passes over each ``[B, H, T]`` statistic (mask, row sums).

    A group's per-item means of all statistics are sorted at once, and the best row (and its key) is looked
    for only in the ``k`` items kept, not in all ``B``.  The result is bit for bit the per-group, per-statistic
    loop's (kept as the reference in tests/corpus/test_fold_vectorised.py): a head's sum still adds its items' row
    sums in order."""
    from attnviz.corpus.reduce import Partial

    S = len(ROW_STATS)
    nh = sum(bl.group.heads for bl in blocks)
    b = len(items)
    kb = min(k, b)
    sums = np.zeros((nh, S))
    counts = np.zeros((nh, S), np.int64)
    tv = np.zeros((S, nh, kb))
    ti = np.zeros((S, nh, kb), np.int64)
    tr = np.zeros((S, nh, kb), np.int64)
    tc = np.zeros((S, nh, kb), np.int64)
    item_ids = np.asarray(items, np.int64)
    for bl in blocks:
        h = bl.group.heads
        hs = slice(bl.group.offset, bl.group.offset + h)
        per_item = np.empty((S, b, h))
        oks = [bl.valid[name][:, None, :] for name in ROW_STATS]  # [B, 1, T]
        counted: dict[int, np.ndarray] = {}  # most statistics share one mask object
        for s, name in enumerate(ROW_STATS):
            n = counted.get(id(bl.valid[name]))
            if n is None:
                n = counted[id(bl.valid[name])] = oks[s].sum(-1)  # [B, 1] rows counted per item
            vm = np.where(oks[s], bl.values[name], 0.0)
            row = vm.sum(-1)  # [B, H]
            # item by item, as [B, H, T].sum((0, 2)) adds them for H > 1; numpy sums [B, 1, T] as one flat run
            sums[hs, s] = row.sum(0) if h > 1 else vm.sum()
            counts[hs, s] = int(n.sum())
            with np.errstate(invalid="ignore", divide="ignore"):
                per_item[s] = np.where(n > 0, row / np.maximum(n, 1), -np.inf)
        # highest per-item mean first; ties go to the earlier item (deterministic across engines)
        order = np.lexsort((np.broadcast_to(item_ids[None, :, None], per_item.shape), -per_item), axis=1)[:, :kb]
        hh = np.arange(h)[None, :]
        tv[:, hs] = np.take_along_axis(per_item, order, 1).transpose(0, 2, 1)
        ti[:, hs] = item_ids[order].transpose(0, 2, 1)
        for s, name in enumerate(ROW_STATS):
            kept = bl.valid[name][order[s]]  # [kb, H, T]
            chosen = _first_top_row(np.where(kept, bl.values[name][order[s], hh], -np.inf))  # [kb, H]
            tr[s, hs] = chosen.T
            tc[s, hs] = _keys(bl, name, order[s], chosen).T
    return Partial(batch_id, b, tokens, sums, counts, tv, ti, tr, tc)


def _keys(bl: Block, name: str, order: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """The key each chosen row looked at ``[kb, H]``: ``key_of(name, rows)[order, head]``, looked up only there."""
    hh = np.arange(chosen.shape[1])[None, :]
    if isinstance(bl.keys, RowSums):
        if name in FIXED_KEYS:
            off = FIXED_KEYS[name]
            return np.zeros_like(chosen) if off is None else chosen + off
        return bl.keys.cols[key_table(name)][order, hh, chosen]
    rows = np.zeros((bl.values[name].shape[0], chosen.shape[1]), np.int64)
    rows[order, hh] = chosen  # key_of is per (item, head): the items not kept only need a valid row
    return bl.keys(name, rows)[order, hh]
