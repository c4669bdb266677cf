"""What a caller asks of a model (:class:`AnalyzeRequest`) and what the run reports (:class:`RunInfo`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnviz import AttnvizError

MODES = ("auto", "dense", "ondemand")


@dataclass(frozen=True)
class AnalyzeRequest:
    """One analysis: an input (text, text pair, image, audio or raw feeds), generation steps and run options."""

    text: str | None = None
    text_pair: str | None = None
    image: str | Path | np.ndarray | None = None
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

    def __post_init__(self):
        if self.generate < 0:
            raise AttnvizError("--generate must be 0 or more steps")
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise AttnvizError(f"--max-seconds {self.max_seconds}: give a positive number of seconds", param="audio")
        if self.mode not in MODES:
            raise AttnvizError(f"unknown mode {self.mode!r}; use auto, dense or ondemand")


@dataclass
class RunInfo:
    """Facts about one analysis, merged into ``AttentionResult.info`` (a dict, so .npz files keep them)."""

    kind: str
    generate_s: float = 0.0
    total_s: float = 0.0
    text: str | None = None
    text_pair: str | None = None
    image: str | None = None
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
        d = asdict(self)
        for k in ("audio", "generated_ids", "generation", "image_preprocessing", "alignment"):
            if d[k] is None:
                d.pop(k)
        if not d["notes"]:
            d.pop("notes")
        return d
