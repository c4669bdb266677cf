"""Where a model's sidecar files may be read from: the one guard for reading beside a model.

Sidecars are the files that travel with a model: ``tokenizer.json``, ``tokenizer_config.json``, ``config.json``,
``generation_config.json``, ``preprocessor_config.json``.  They are read from the model's own folder only, so a
file planted next to that folder never changes a result.  The one sanctioned step up is the Hugging Face Hub
layout, ``REPO/onnx/model.onnx`` with the tokenizer and config files in ``REPO/``: a model in a folder named
exactly ``onnx`` also reads them from the folder above (its own folder first).
"""

from __future__ import annotations

from pathlib import Path

from attnviz import AttnvizError
from attnviz.core.untrusted import read_json

HUB_ONNX_FOLDER = "onnx"  # the Hub keeps ONNX exports in REPO/onnx/, beside nothing else of the repo's


def sidecar_dirs(model_file: str | Path) -> list[Path]:
    """The folders a model file's sidecars are read from, nearest first."""
    folder = Path(model_file).parent
    return [folder, folder.parent] if folder.name == HUB_ONNX_FOLDER else [folder]


def sidecar(model_file: str | Path, name: str) -> Path | None:
    """The sidecar ``name`` of a model file (the nearest of :func:`sidecar_dirs` that has it), or None.  Whatever
    is there is returned, a FIFO or a folder too: the reader's own guard refuses it in one line (a tokenizer) or
    passes over it (a config file), so nothing blocks and nothing nearer is skipped for a file further up."""
    return next((d / name for d in sidecar_dirs(model_file) if (d / name).exists()), None)


def sidecar_json(model_file: str | Path, name: str) -> dict:
    """A JSON sidecar of a model file as a dict ({} when absent, unreadable or not an object); read only where
    :func:`sidecar` allows."""
    p = sidecar(model_file, name)
    try:
        d = read_json(p, p.name) if p is not None and p.is_file() else {}
    except AttnvizError:  # read through the regular-file guard: a FIFO is never waited on
        return {}
    return d if isinstance(d, dict) else {}
