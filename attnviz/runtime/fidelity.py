"""Export fidelity: where the folder's config.json says the model's attention has something its graph lacks.

attnviz shows the probabilities the graph computes, exactly.  An exporter can drop part of the model's eager
attention — ``optimum-cli`` exports Gemma2 with sdpa, which has no logit soft-capping (its maps differ from the
eager model's by 0.26), and an sdpa export may build no sliding-window mask — and then the maps are right for the
file and wrong for the model.  Two checks, each said in one line that names the fix:

- ``attn_logit_softcapping`` set, and no ``Tanh`` between a site's Q·Kᵀ and its Softmax (static, from the graph);
- ``sliding_window`` smaller than the input, and weight beyond the window at layers that should be windowed
  (from the maps of a run).

The config is read through :func:`attnviz.runtime.sidecar.sidecar_json` only (the model's folder, or ``REPO/``
above ``REPO/onnx/``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnviz.core.attention import MapSource, SiteInfo
from attnviz.runtime.graph.base import Site
from attnviz.runtime.graph.index import Graph, _attr
from attnviz.runtime.sidecar import sidecar_json

REEXPORT = "re-export with attnviz export-hf, or with optimum from a model loaded with attn_implementation='eager'"
WINDOW_EPS = 1e-4  # weight beyond the window that counts as "not windowed" (a masked key gets exactly 0 or ~1e-30)


# config.json model types whose exported attention is no [query, key] map attnviz can place, and why: said in one
# line at open, instead of "no attention found ... may not be a transformer" (Longformer: no site is found) or of
# Swin's "no window layout" (MobileViT: found as windows on a batch axis, which they are not)
CHUNKED = "sliding-window attention computed in overlapping chunks, each query's probabilities over its own window"
UNFOLDED = "attention across patches, once per pixel offset within a patch (the batch axis holds the offsets)"
UNSHOWABLE = {
    "longformer": f"Longformer's {CHUNKED}",
    "led": f"LED's encoder has Longformer's {CHUNKED}",
    "mobilevit": f"MobileViT's {UNFOLDED}",
    "mobilevitv2": f"MobileViTV2's {UNFOLDED}",
}


def unshowable(model_type) -> str | None:
    why = UNSHOWABLE.get(model_type) if isinstance(model_type, str) else None
    return f"{why}: no [query, key] map over the input, which attnviz cannot show yet" if why else None


@dataclass(frozen=True)
class AttentionConfig:
    """What config.json says the model's eager attention does beyond softmax(QKᵀ·s + mask)."""

    softcap: float | None = None
    window: int | None = None
    windowed: tuple[bool, ...] | None = None  # per decoder layer; None = every layer (Mistral)

    @classmethod
    def of(cls, model_file: str | Path) -> AttentionConfig:
        cfg = sidecar_json(model_file, "config.json")
        text = cfg.get("text_config")  # Gemma3 and other multimodal configs keep the decoder's keys there
        if isinstance(text, dict):
            cfg = {**cfg, **text}
        cap = cfg.get("attn_logit_softcapping")
        window = cfg.get("sliding_window")
        if cfg.get("use_sliding_window") is False:  # Qwen2: a window in the config, switched off
            window = None
        types = cfg.get("layer_types")
        windowed = (
            tuple(t == "sliding_attention" for t in types)
            if isinstance(types, list) and all(isinstance(t, str) for t in types)
            else None
        )
        return cls(
            float(cap) if isinstance(cap, (int, float)) and not isinstance(cap, bool) and cap > 0 else None,
            int(window) if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None,
            windowed,
        )

    def windowed_layer(self, layer: int) -> bool:
        if self.window is None:
            return False
        return self.windowed is None or (0 <= layer < len(self.windowed) and self.windowed[layer])


def _has_softcap(g: Graph, s: Site) -> bool | None:
    """Whether a site's scores pass through a tanh before its softmax (None: the graph cannot say)."""
    node = s.g.nodes[s.node_index]
    if s.method == "onnx-attention":
        return bool(_attr(node, "softcap", 0.0))
    if s.method != "softmax":
        return None  # fused contrib ops: their soft-capping is an attribute of their own, not checked here
    return any(s.g.nodes[i].op_type == "Tanh" for i in s.epilogue)


def static_notes(g: Graph, sites: list[Site], cfg: AttentionConfig) -> list[str]:
    """What the graph alone shows it lacks."""
    if cfg.softcap is None:
        return []
    lacking = [s for s in sites if _has_softcap(g, s) is False]
    if not lacking:
        return []
    return [
        f"config.json has attn_logit_softcapping {cfg.softcap:g} but {len(lacking)} of {len(sites)} attention "
        "sites have no tanh before their softmax: these are the export's maps, which differ from the model's eager "
        f"attention; {REEXPORT}"
    ]


def beyond_window(m: MapSource, window: int) -> float:
    """The largest weight one query row of batch row 0 puts on keys ``window`` or more positions behind it."""
    _, heads, tq, tk = m.shape
    if tq != tk or tk <= window:
        return 0.0
    far = np.tril(np.ones((tq, tk), bool), -window)  # key j <= i - window: outside transformers' sliding window
    return max(float((m.head(0, h) * far).sum(axis=1).max()) for h in range(heads))


def map_notes(sites: list[SiteInfo], maps: list, cfg: AttentionConfig) -> list[str]:
    """What a run's maps show the graph lacks: weight beyond the sliding window at layers that should be windowed."""
    if cfg.window is None:
        return []
    layers = [
        s.layer
        for s, m in zip(sites, maps)
        if s.kind == "self" and cfg.windowed_layer(s.layer) and beyond_window(m, cfg.window) > WINDOW_EPS
    ]
    if not layers:
        return []
    return [
        f"config.json has sliding_window {cfg.window} but self-attention at layer(s) "
        f"{', '.join(map(str, layers[:8]))}{', ...' if len(layers) > 8 else ''} puts weight on keys beyond it: these "
        f"are the export's maps, which differ from the model's eager attention; {REEXPORT}"
    ]
