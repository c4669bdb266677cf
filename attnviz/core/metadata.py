"""The ``attnviz.*`` keys of ONNX ``metadata_props`` that make a model self-describing.

Written by ``attnviz.training.export``; read by the runtime's input adapters.  All values are strings;
the structured ones are JSON.

=======================  =====================================================================
key                      value
=======================  =====================================================================
attnviz.name             optional: the model's name for titles and the sidebar (``export-hf`` writes its source's:
                         the source folder's name, else config.json's ``_name_or_path`` or architecture);
                         without it a ``model.onnx`` is named from its folder (:func:`source_name`)
attnviz.task             task name: sequence-classification, forecasting, vit-classification,
                         translation, captioning (or anything; unknown tasks use generic adapters)
attnviz.vocab            JSON list (index = id) for a shared vocabulary, or
                         ``{"source": [...], "target": [...]}`` for translation
attnviz.tokenizer        optional: a whole HF ``tokenizer.json`` (string) for the encoder/only input
attnviz.target_tokenizer optional: the same for the decoder side
attnviz.tokenize         how to split text for a vocab without tokenizer: "whitespace" | "chars"
attnviz.labels           JSON list of class names (classification heads)
attnviz.image            JSON ``{"size": [H, W], "channels": C, "mean": [...], "std": [...],
                         "grid": [rows, cols], "offset": n_leading_non_patch_tokens}``
attnviz.special          JSON ``{"pad": id, "bos": id, "eos": id, "cls": id, "unk": id, "sep": id}``
                         (any subset).  Text built from a vocab (no tokenizer.json): "cls" is prepended
                         and "sep" appended to encoder text.  Decoder generation starts from "bos" and
                         stops at "eos"; for translation bos/eos/pad are ids of the TARGET vocab (source
                         ids, if needed, go under "source": {"pad": id, "eos": id, ...}).
attnviz.inputs           JSON ``{onnx_input_name: role}``; roles: tokens, mask, token_types, positions,
                         decoder_tokens, decoder_mask, image, series
attnviz.max_positions    optional: how many tokens the text side takes (its position table); longer texts
                         are refused with an offer of --max-tokens
attnviz.sample           optional: JSON ``{"text": ..., "text_pair": ..., "image": "resources/..."}``
                         a sample input the GUI opens the model with
attnviz.config           JSON of the training config (model + task), for reproduction
attnviz.metrics          JSON of held-out metrics measured at export time
attnviz.alignment        optional: JSON ``{"heads": [[decoder layer, head], ...], "convention": "input" |
                         "predict"}``: the cross-attention heads that align words (e.g. trained with guided
                         alignment), the first one the best; rows stand for the decoder's input token
                         ("input", Shift-Att) or the token it predicts ("predict").  The Alignment view
                         opens on the first head with those row labels.
attnviz.windows          optional: JSON ``{"patch_size": p, "window_size": w, "depths": [blocks per stage]}``
                         for Swin-style windowed attention (every other block of a stage shifted by w // 2,
                         the grid halved between stages): the maps are placed back on each stage's patch
                         grid (``attnviz.core.windows``).  An optimum export folder's ``config.json`` with
                         ``model_type: swin`` supplies it.
=======================  =====================================================================
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from attnviz import AttnvizError
from attnviz.core.untrusted import parse_json

PREFIX = "attnviz."
JSON_KEYS = ("vocab", "labels", "image", "special", "inputs", "sample", "config", "metrics", "alignment", "windows")
INPUT_ROLES = ("tokens", "mask", "token_types", "positions", "decoder_tokens", "decoder_mask", "image", "series")


def parse(props: dict[str, str]) -> dict:
    """``{"attnviz.x": "..."}`` -> ``{"x": parsed}``; bad JSON is kept as the raw string."""
    out = {}
    for k, v in props.items():
        if not k.startswith(PREFIX):
            continue
        key = k[len(PREFIX) :]
        if key in JSON_KEYS:
            try:
                v = parse_json(v, f"metadata {k}") if isinstance(v, (str, bytes)) else v
            except AttnvizError:  # too deep, too long a number or not JSON: kept as the raw string
                pass
        out[key] = v
    return out


def section(meta: Mapping[str, Any], key: str) -> dict[str, Any]:
    """The JSON object under ``key`` (``special``, ``image``, ``inputs``, ``config``), or ``{}`` when it is absent
    or not an object: hand-written metadata is read leniently, a malformed value counts as missing."""
    value = meta.get(key)
    return value if isinstance(value, dict) else {}


TOKEN_ID_MAX = 2**31 - 1  # int32: the narrowest token-id input an exported model takes


def is_token_id(v: Any) -> bool:
    """A whole number a model's id input can hold (not a bool, a string, a float, negative or past int32)."""
    return type(v) is int and 0 <= v <= TOKEN_ID_MAX


def check_special(special: Any, where: str) -> None:
    """One line for a special-token id that cannot be an id (``attnviz.special``, and its translation "source"
    section): fed to the model it overflowed numpy (an internal error), or never matched as an end of sequence."""
    if not isinstance(special, dict):
        return
    for k, v in special.items():
        if isinstance(v, dict):
            check_special(v, where)
        elif v is not None and not is_token_id(v):
            raise AttnvizError(
                f"{where}: special token {str(k)[:40]} = {str(v)[:40]} is not a token id "
                f"(a whole number 0..{TOKEN_ID_MAX:,}); fix or remove it"
            )


def dump(meta: dict) -> dict[str, str]:
    """Inverse of :func:`parse`."""
    return {PREFIX + k: (v if isinstance(v, str) else json.dumps(v)) for k, v in meta.items()}


def alignment_heads(meta: dict) -> tuple[list[tuple[int, int]], str] | None:
    """``([(layer, head), ...], convention)`` from ``attnviz.alignment``, or None when absent or malformed."""
    a = meta.get("alignment")
    if not isinstance(a, dict) or a.get("convention") not in ("input", "predict"):
        return None
    try:
        heads = [(int(l_), int(h)) for l_, h in a.get("heads", [])]
    except (TypeError, ValueError):
        return None
    return (heads, a["convention"]) if heads else None


# names that say nothing about the model: a folder called so is not a name (export-hf's model.onnx, optimum's onnx/)
GENERIC_NAMES = frozenset({"", ".", "model", "models", "onnx", "hf", "export", "exports", "checkpoint", "weights"})


def source_name(folder: str, config: Mapping[str, Any]) -> str | None:
    """A model's name from its folder's name and its Hugging Face ``config.json``: the folder's name unless it is
    generic, else ``_name_or_path`` (a hub id as it is, a local path's last part), else ``architectures[0]``."""
    if folder not in GENERIC_NAMES:
        return folder
    path = str(config.get("_name_or_path") or "").replace("\\", "/").rstrip("/")
    if path.startswith(("/", ".", "~")) or ":" in path:  # a local path: its folder's name
        path = path.rsplit("/", 1)[-1]
    if path not in GENERIC_NAMES:
        return path
    arch = config.get("architectures")
    return str(arch[0]) if isinstance(arch, list) and arch and isinstance(arch[0], str) else None
