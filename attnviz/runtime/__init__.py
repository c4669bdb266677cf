"""onnx + onnxruntime engine (no Qt, no torch): open a model (a file or an export folder), find its attention, run it.

The public names load on first use (PEP 562): a process that only needs a light part of the runtime (the corpus
driver spawning its workers through ``runtime.isolation``, a worker unpickling its task) does not import onnx for
the package's sake (~0.05-0.1 s CPU before anything else can start)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnviz.runtime.folder import ModelSet, open_model
    from attnviz.runtime.model import AttentionModel, IOInfo
    from attnviz.runtime.protocol import AttnModel

__all__ = ["AttentionModel", "AttnModel", "IOInfo", "ModelSet", "open_model"]

# public name -> the module that defines it
_HOME = {
    "AttentionModel": "attnviz.runtime.model",
    "IOInfo": "attnviz.runtime.model",
    "AttnModel": "attnviz.runtime.protocol",
    "ModelSet": "attnviz.runtime.folder",
    "open_model": "attnviz.runtime.folder",
}


def __getattr__(name: str):
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'attnviz.runtime' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value
