"""A dual encoder's scores from its own graph output (CLIP, SigLIP whole), or the one note why a run has none.

The score is the model's: ``logits_per_image`` (``[images, texts]``, the logit scale and SigLIP's bias already in the
graph) through the family's rule (:mod:`attnviz.core.text_scores`).  The rule is the folder's ``config.json``
model type where there is one; else what the graph shows: SigLIP's image tower ends in an attention-pooling head (a
site of kind ``pooling``), CLIP's in none.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from attnviz.core import metadata as md
from attnviz.core.attention import AttentionResult, TokenAxis
from attnviz.core.text_scores import RULES, TEXT_SCORES_KEY, PairLayout, TextScores
from attnviz.runtime.graph.labels import DUAL_ENCODER_MODEL_TYPES
from attnviz.runtime.sidecar import sidecar_json, sidecar_stamps

if TYPE_CHECKING:
    from attnviz.runtime.protocol import AttnModel

# graph outputs that hold the pair logits: their name, and whether the texts are its first axis (then transposed)
LOGIT_OUTPUTS = {"logits_per_image": False, "logits_per_text": True}
# config.json model types whose score is a sigmoid per pair (SigLIP's loss); every other dual encoder's a softmax
SIGMOID_TYPES = frozenset(("siglip", "siglip2"))


def model_type(model: AttnModel) -> str:
    """The model type its metadata or the folder's config.json names ('' when neither does)."""
    t = md.section(model.meta, "config").get("model_type") or folder_config(model.path).get("model_type")
    return t if isinstance(t, str) else ""


def folder_config(model_file: str | Path) -> dict:
    """The folder's config.json (:func:`~attnviz.runtime.sidecar.sidecar_json`), read again only when it changed:
    every encoder run asks whether it is a dual encoder's tower, and reading a Hub config each time cost ~0.4 ms."""
    stamps = sidecar_stamps(model_file, "config.json")
    return dict(_config_at(str(model_file), stamps)) if any(stamps) else {}  # (a copy: the cached one stays)


@lru_cache(maxsize=32)
def _config_at(model_file: str, stamps: tuple[int, ...]) -> dict:
    return sidecar_json(model_file, "config.json")  # (read through the guard; the stamps only key the cache)


def is_dual(result: AttentionResult) -> bool:
    """A whole dual encoder's result: its sites are in two towers."""
    return any(s.tower == "text" for s in result.sites) and any(s.tower == "image" for s in result.sites)


def score_rule(model: AttnModel, result: AttentionResult) -> str:
    """The rule: sigmoid (SigLIP) or softmax (CLIP and the others), by model type, else by SigLIP's pooling head."""
    t = model_type(model)
    if t in DUAL_ENCODER_MODEL_TYPES:
        return "sigmoid" if t in SIGMOID_TYPES else "softmax"
    return "sigmoid" if any(s.kind == "pooling" and s.tower == "image" for s in result.sites) else "softmax"


def pair_logits(outputs: dict, prefer: str = "logits_per_image") -> tuple[str, np.ndarray] | None:
    """The graph output of the pair logits as ``[images, texts]`` (None: the export has none); ``prefer`` the one
    named where the graph has both (one text's images are scored from ``logits_per_text``, as CLIP's users do)."""
    for name in sorted(LOGIT_OUTPUTS, key=lambda n: n != prefer):
        a = outputs.get(name)
        if a is not None and np.ndim(a) == 2:
            a = np.asarray(a)
            return name, (a.T if LOGIT_OUTPUTS[name] else a)
    return None


def row_text(axis: TokenAxis | None) -> str:
    """A row's text as its tokens say it (raw feeds: no typed text), specials and padding left out."""
    if axis is None:
        return ""
    sp = axis.special or [False] * len(axis.labels)
    return " ".join(t for t, s in zip(axis.labels, sp) if not s)


def attach_scores(
    model: AttnModel,
    result: AttentionResult,
    texts: list[str],
    images: list[str] | None = None,
    layout: PairLayout | None = None,
) -> list[str]:
    """Put each row's score in ``result.info`` (:data:`TEXT_SCORES_KEY`); the notes to add to the run (why there
    is no score).  ``texts``: each batch row's text (typed, or read from the row's tokens); ``images``: each row's
    image name where the run had several images, ``layout`` which image and text each row holds (None: row i is
    image i and text i)."""
    if not is_dual(result):
        t = model_type(model)
        if t in DUAL_ENCODER_MODEL_TYPES:  # one tower of a dual encoder, exported alone
            return [
                f"{model.path.name} is one tower of a {t} dual encoder: no score (a score needs the whole model, its "
                "logits_per_image output)"
            ]
        return []
    layout = layout or PairLayout.diagonal(len(texts))
    got = pair_logits(result.outputs, "logits_per_text" if layout.over == "images" else "logits_per_image")
    if got is None:
        outs = ", ".join(result.outputs) or "none"
        return [f"no score: {model.path.name} has no logits_per_image output (its outputs: {outs})"]
    name, logits = got
    if logits.shape != (len(texts), len(texts)):  # a batch of other counts (refused before a run; a feeds file)
        return [f"no score: {name} is {list(logits.shape)} for {len(texts)} rows"]
    rule = score_rule(model, result)
    scores = RULES[rule].scores(logits, layout)
    result.info[TEXT_SCORES_KEY] = TextScores(list(texts), scores, rule, name, images, layout.over).to_dict()
    return []
