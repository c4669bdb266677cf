"""What a caller asks of a model (:class:`AnalyzeRequest`) and what the run reports (:class:`RunInfo`)."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from attnviz import AttnvizError
from attnviz.core.numbers import spelled
from attnviz.core.setting_words import fix, name

MODES = ("auto", "dense", "ondemand")
MAX_BEAMS = 64  # each beam is a batch row of every step and of the maps kept


@dataclass(frozen=True)
class AnalyzeRequest:
    """One analysis: an input (text, text pair, image, audio or raw feeds), generation steps and run options."""

    # a text; a list of them is accepted too: a dual encoder's candidate texts, each scored against the one image
    # (normalised in __post_init__: ``text`` the first, ``texts`` all of them), so the engine reads ``text`` as one str
    text: str | None = None
    text_pair: str | None = None
    # an image file or array; a list of them: several images in one prompt (a vision–language model whose processor
    # takes several: its placeholders matched to them in order)
    image: str | Path | np.ndarray | Sequence[str | Path | np.ndarray] | None = None
    feeds: Mapping[str, np.ndarray] | str | Path | None = None  # raw feeds, or a .npz keyed by input name
    generate: int = 0
    mode: str = "auto"  # auto | dense | ondemand
    image_size: tuple[int, int] | None = None
    image_mean: list[float] | None = None
    image_std: list[float] | None = None
    use_cache: bool = True  # generation feeds the KV cache where the model has one (False: re-run the sequence)
    max_tokens: int | None = None  # keep only the first N text tokens (the model's position limit is checked)
    # a sound file, mono samples at the model's rate, or a list of either (a batch of clips)
    audio: str | Path | np.ndarray | Sequence[str | Path | np.ndarray] | None = None
    max_seconds: float | None = (
        None  # keep only the first S seconds of the audio (else longer than the window is refused)
    )
    # beam search with this many beams (1: greedy); the result's batch rows are the finished hypotheses, best first
    beams: int = 1
    texts: tuple[str, ...] | None = None  # several texts (a dual encoder's candidates), in order; None: one text

    def __post_init__(self):
        several = self.texts if self.texts is not None else self.text
        if isinstance(several, (list, tuple)):  # frozen: the normalised values set as __init__ would have
            texts = tuple(several)
            if not texts:
                raise AttnvizError("no text given; give a text (--text T, once per candidate text)", param="text")
            if not all(isinstance(t, str) for t in texts):
                raise AttnvizError("each text must be a string", param="text")
            object.__setattr__(self, "text", texts[0])
            object.__setattr__(self, "texts", texts if len(texts) > 1 else None)
        validate(self)


def validate(req: AnalyzeRequest) -> None:
    """The one check of a request's own values (the model-dependent ones come when its inputs are built):
    every caller, the CLI's flags and the window's input panel, gets the same line for the same mistake."""
    from attnviz.core import limits

    if not isinstance(req.generate, numbers.Integral) or req.generate < 0:
        raise AttnvizError(f"generate {req.generate}: give a number of steps ≥ 0", param="generate")
    limits.check("generate", req.generate, name("generate"))
    if not isinstance(req.beams, numbers.Integral) or isinstance(req.beams, bool) or not 1 <= req.beams <= MAX_BEAMS:
        raise AttnvizError(f"beams {req.beams}: give a number of beams from 1 to {MAX_BEAMS}", param="beams")
    if req.beams > 1 and not req.generate:
        raise AttnvizError(fix("beams_need_generate", beams=req.beams), param="beams")
    if req.max_tokens is not None and req.max_tokens < 1:
        raise AttnvizError(
            f"max tokens {req.max_tokens}: give at least 1 (or none to keep every token)", param="max_tokens"
        )
    if req.max_seconds is not None and not req.max_seconds > 0:
        raise AttnvizError(
            f"max seconds {spelled(req.max_seconds)}: give a positive number of seconds", param="max_seconds"
        )
    if isinstance(req.image, (list, tuple)) and not req.image:
        raise AttnvizError("no image given; give an image file (--image PATH, once per image)", param="image")
    if req.mode not in MODES:
        raise AttnvizError(f"unknown mode {req.mode!r}; use auto, dense or ondemand")


@dataclass
class RunInfo:
    """Facts about one analysis, merged into ``AttentionResult.info`` (a dict, so .npz files keep them)."""

    kind: str
    generate_s: float = 0.0
    total_s: float = 0.0
    text: str | None = None
    text_pair: str | None = None
    texts: list[str] | None = None  # several texts (a dual encoder's candidates, one a batch row; ``text``: the first)
    image: str | None = None
    images: list[str] | None = None  # several images in one prompt: every one, in order (``image`` is the first)
    audio: list[str] | None = None  # the sound files (or "samples" for clips given in memory)
    generated_ids: list[int] | None = None
    generation: str | None = None  # "kv-cache" | "full re-run" when the model generated
    batch: int = 1
    notes: list[str] = field(default_factory=list)
    image_preprocessing: str | None = None  # the normalisation an image got (preset, mean/std, size, source)
    # the model's declared alignment heads and row convention (attnviz.alignment), so that figures from this
    # result (or its .npz) open on the head the window opens on
    alignment: dict | None = None

    def to_dict(self) -> dict[str, Any]:
        # its fields' values, lists and dicts copied (what asdict gives): asdict's generic deep copy
        # was ~0.1 ms of every call
        d = {f.name: _copied(getattr(self, f.name)) for f in fields(self)}
        for k in ("texts", "images", "audio", "generated_ids", "generation", "image_preprocessing", "alignment"):
            if d[k] is None:
                d.pop(k)
        if not d["notes"]:
            d.pop("notes")
        return d


def _copied(v: Any) -> Any:
    """A RunInfo value as ``asdict`` gives it: containers new, so the info dict shares nothing with the request."""
    if isinstance(v, list):
        return [_copied(x) for x in v]
    if isinstance(v, dict):
        return {k: _copied(x) for k, x in v.items()}
    return v
