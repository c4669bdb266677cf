"""A run's result assembled from the tensors it fetched: each site's map (as fetched, a softmax of its scores,
recomputed per head from Q and Kᵀ or from packed Attention's inputs), the sites in canonical order (a Loop/Scan
body's iterations numbered on, an If branch that did not run left out, a Softmax over another axis refused), and
windowed attention placed on the image."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from attnviz import AttnvizError
from attnviz.core import metadata as md
from attnviz.core import windows as win
from attnviz.core.attention import DenseMap, SiteInfo
from attnviz.runtime import graph as gr
from attnviz.runtime.sitemaps import KeptMap, PackedMap, RecomputeMap, softmax, to_bhqk


def collect_maps(
    label: str, sites: list[gr.Site], exposed, got: dict, site_map: Callable[[gr.Site, dict, dict], Any]
) -> tuple[list[gr.Site], list, list[str]]:
    """Maps in canonical order, with the sites they belong to.

    A site in a ``Loop``/``Scan`` body gives one map per iteration (its layers, numbered on); a site in an
    ``If`` branch that did not run (an empty placeholder) gives none; a Softmax found not to normalise the
    key axis is refused with a note, never shown as attention.  ``site_map(site, exposed extra, fetched)``: one
    site's map (:func:`site_map` with the run's batch and mode).
    """
    kept: list[gr.Site] = []
    maps: list = []
    notes: list[str] = []
    for s, ex in zip(sites, exposed.site_extra):
        raw = got.get(s.probs) if "q" not in ex else None
        if raw is not None and raw.size == 0 and s.g is not None and s.g.path:
            continue  # the If branch holding this site did not run
        if raw is not None and not normalises_keys(s, raw):
            notes.append(
                f"site {s.node_name!r} skipped: its Softmax normalises axis {s.extra['softmax_axis']} of a "
                f"rank-{raw.ndim - bool(s.loop)} tensor, not the key axis, so it is not attention"
            )
            continue
        if s.loop and raw is not None:
            for it in range(raw.shape[0]):
                kept.append(iteration_site(s, it))
                maps.append(site_map(s, ex, {s.probs: raw[it]}))
            continue
        kept.append(s)
        maps.append(site_map(s, ex, got))
    if len(kept) != len(sites) or any(s.loop for s in kept):
        kept = [dataclasses.replace(s, extra=dict(s.extra)) for s in kept]  # this run's numbering only
        renumber(kept)
    if not kept:
        raise AttnvizError(
            f"{label}: no attention map came out of this run ({'; '.join(notes) or 'every site was in a branch that did not run'})"
        )
    return kept, maps, notes


def site_map(
    graph: gr.Graph,
    s: gr.Site,
    ex: dict,
    got: dict,
    batch: int,
    mode: str,
    epilogue: Callable[[gr.Site, dict], Any],
    head_session: Callable[[gr.Site, dict, Mapping], Any] | None = None,
):
    """Site ``s``'s map from the tensors a run fetched (``ex``: what its session exposes for it): Q and Kᵀ kept
    for per-head recompute through ``epilogue(site, fetched)``'s session (None: it could not be rebuilt) -- or,
    where the run left them on its device (runtime/kept.py), through ``head_session(site, fetched, QK node
    attributes)``'s (the head model's session and its pooling twin's) -- scores a softmax follows, packed
    Attention's inputs, or the probabilities as fetched."""
    if "q" in ex:
        q, k = got[ex["q"]], got[ex["k"]]
        attrs = graph.attributes(graph.producer[s.qk])
        side = {n: got[n] for n in ex.get("side", [])}
        on_device = not isinstance(q, np.ndarray) or not isinstance(k, np.ndarray)
        if on_device:
            sessions = head_session(s, got, attrs) if head_session is not None else None
            if sessions is not None:
                head, pool = sessions
                return KeptMap(q, k, side, head, batch, attrs, pool)
        else:
            epi = epilogue(s, got)
            if epi is not None:
                return RecomputeMap(q, k, side, epi, s.qk, batch, attrs)
        raise AttnvizError(
            f"site {s.node_name!r}: its epilogue could not be rebuilt for per-head recompute; use dense memory mode",
            param="memory",
        )
    if s.method == "mha-qk":
        return DenseMap(softmax(to_bhqk(got[s.probs], batch)))
    if s.method == "recompute-packed":
        node = graph.nodes[s.node_index]
        w = packed_const(graph, node.input[1])
        bias = packed_const(graph, node.input[2]) if len(node.input) > 2 and node.input[2] else None
        mask = None
        if "mask_index" in ex:
            mask = got.get(ex["mask_index"])
            if mask is None:
                mask = graph.const_value(ex["mask_index"])
        pm = PackedMap(got[s.probs].astype(np.float32), w, bias, s.heads, mask, s.extra)
        return pm if mode == "ondemand" else DenseMap(pm.array())
    return DenseMap(to_bhqk(got[s.probs], batch))


def packed_const(graph: gr.Graph, name: str) -> np.ndarray:
    """A weight or bias of a com.microsoft Attention node, as float32 (the site finder refuses non-constant ones)."""
    v = graph.const_value(name)
    if v is None:
        raise AttnvizError(
            f"{name!r} of a com.microsoft Attention node is not a constant; its maps cannot be recomputed"
        )
    return v.astype(np.float32)


def place_windows(
    label: str, meta: dict, image: str | None, kept: list[gr.Site], maps: list, feeds: dict[str, np.ndarray]
) -> list:
    """Windowed attention (Swin: ``[B·windows, H, N, N]``, each window's patches attending among themselves)
    would pass for a batch of B·windows inputs with N tokens each: a map right number by number but shown on
    the wrong axes.  With a window layout (``attnviz.windows`` metadata, or a Swin export folder's
    config.json) every site becomes a :class:`~attnviz.core.windows.WindowedMap` over its stage's patch grid,
    once each map has exactly the shape the layout predicts for the size the image was fed; a windowed model
    without a layout, or one that disagrees with it, is refused in one line.  ``image``: the fed image input
    (None: no image, the maps as they are); ``label``: the file named in refusals."""
    if image is None:
        return maps
    layout = win.WindowLayout.from_meta(md.section(meta, "windows"))
    if layout is None and np.ndim(feeds[image]) == 5:  # an images axis (a VLM's tiles): a map row per image
        return maps
    batch = feeds[image].shape[0]
    # a dual encoder's text tower runs over the texts, whose batch is its own (each text once against each image
    # once: runtime/dual_towers.py; raw feeds of unpaired counts are refused there): never a window of the image's
    text = {id(s) for s in kept if s.extra.get("tower") == "text"}
    windowed = next(
        (
            (s, m)
            for s, m in zip(kept, maps)
            if id(s) not in text and m.shape[0] != batch and batch and m.shape[0] % batch == 0
        ),
        None,
    )
    if layout is None:
        if windowed is None:
            return maps
        s, m = windowed
        raise AttnvizError(
            f"{label}: site {s.node_name!r} attends within windows ({m.shape[0] // batch} windows of "
            f"{m.shape[-1]} patches per image, as Swin does) and no window layout is known to place them on "
            "the image; open the model from its export folder (config.json with model_type swin) or declare "
            "attnviz.windows metadata"
        )
    hw = feeds[image].shape[-2:]
    plan = layout.sites((int(hw[0]), int(hw[1])))
    if len(plan) != len(maps):
        raise AttnvizError(
            f"{label}: its window layout has {len(plan)} blocks (depths {list(layout.depths)}) but "
            f"the graph has {len(maps)} attention sites; the layout does not describe this model"
        )
    placed = []
    for s, m, sw in zip(kept, maps, plan):
        why = win.layout_problem(sw, m.shape, batch)
        if why:
            raise AttnvizError(
                f"{label}: site {s.node_name!r} does not match its window layout at {hw[0]}x{hw[1]} pixels: {why}"
            )
        placed.append(win.WindowedMap(m.array(), batch, sw))
    return placed


def normalises_keys(s: gr.Site, raw: np.ndarray) -> bool:
    """A Softmax with an explicit axis must normalise the last (key) axis of the tensor it produced."""
    axis = s.extra.get("softmax_axis")
    if axis is None:
        return True
    rank = raw.ndim - (1 if s.loop else 0)
    return (axis % rank if rank else axis) == rank - 1


def with_stage(info: SiteInfo, m) -> SiteInfo:
    """A windowed site is labelled with its stage: stages have grids of their own and form blocks of their own."""
    if not isinstance(m, win.WindowedMap):
        return info
    return dataclasses.replace(info, stage=m.layout.stage)


def iteration_site(s: gr.Site, it: int) -> gr.Site:
    return dataclasses.replace(s, layer=s.layer + it, node_name=f"{s.node_name}[iteration {it}]", extra=dict(s.extra))


def renumber(sites: list[gr.Site]) -> None:
    """Layers numbered 0.. per (stack, kind) again after loop iterations were added or sites skipped."""
    count: dict[tuple[str, str], int] = {}
    for s in sites:
        key = (s.stack, s.kind)
        s.layer = count.get(key, 0)
        count[key] = s.layer + 1
