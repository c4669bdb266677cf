"""A task's data against the model configuration, before training: ids past a vocabulary, labels past the
classes or sequences past the position table would fail deep inside torch (an IndexError on the first batch,
or a CUDA assert), so each is one line naming the config field and the value the data needs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from attnviz import AttnvizError
from attnviz.training.config import ModelConfig


@dataclass(frozen=True)
class Need:
    """``field`` must be at least ``need(data, mcfg)`` (None: this data does not say)."""

    field: str
    what: str  # what in the data asks for it, for the message
    need: Callable[[dict[str, np.ndarray], ModelConfig], int | None]


def _max_id(key: str, ignore: int | None = None) -> Callable[[dict, ModelConfig], int | None]:
    def need(data: dict, mcfg: ModelConfig) -> int | None:
        a = data.get(key)
        if a is None or not np.issubdtype(np.asarray(a).dtype, np.integer) or not np.size(a):
            return None
        a = np.asarray(a)
        if ignore is not None:
            a = a[a != ignore]
        return int(a.max()) + 1 if a.size else None

    return need


def _length(*keys: str) -> Callable[[dict, ModelConfig], int | None]:
    def need(data: dict, mcfg: ModelConfig) -> int | None:
        shapes = [np.shape(data[k])[1] for k in keys if k in data and np.ndim(data[k]) >= 2]
        return max(shapes) if shapes else None

    return need


def _class_labels(data: dict, mcfg: ModelConfig) -> int | None:
    return _max_id("labels")(data, mcfg) if mcfg.head == "classify" else None


def _token_labels(data: dict, mcfg: ModelConfig) -> int | None:
    return _max_id("labels", ignore=-100)(data, mcfg) if mcfg.head == "lm" else None


def _source_ids(data: dict, mcfg: ModelConfig) -> int | None:
    return _max_id("input_ids")(data, mcfg) if mcfg.input_kind == "tokens" else None


# field -> what the data needs of it; the target vocabulary is tgt_vocab_size, or vocab_size when that is 0
TARGET = "target vocabulary (tgt_vocab_size, or vocab_size)"
NEEDS = (
    Need("vocab_size", "input token ids", _source_ids),
    Need("n_classes", "class labels", _class_labels),
    Need(TARGET, "decoder token ids", _max_id("decoder_input_ids")),
    Need(TARGET, "predicted token ids", _token_labels),
    Need("max_len", "sequences", _length("input_ids", "decoder_input_ids", "series")),
)

HAVE = {
    "vocab_size": lambda m: m.vocab_size,
    "n_classes": lambda m: m.n_classes,
    TARGET: lambda m: m.target_vocab,
    "max_len": lambda m: m.max_len,
}


def check(task_name: str, mcfg: ModelConfig, data: dict[str, np.ndarray]) -> None:
    """Raise one AttnvizError for the first field the data needs more of than the configuration gives."""
    for n in NEEDS:
        need = n.need(data, mcfg)
        have = HAVE[n.field](mcfg)
        if need is not None and need > have:
            raise AttnvizError(
                f"model config: {n.field}={have} is too small for {task_name}'s data, whose {n.what} need {need}; "
                f"set it to {need} or more (or leave it to the preset)"
            )
