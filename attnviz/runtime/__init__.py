"""onnx + onnxruntime engine (no Qt, no torch): open a model (a file or an export folder), find its attention, run it."""

from attnviz.runtime.folder import ModelSet, open_model
from attnviz.runtime.model import AttentionModel, IOInfo
from attnviz.runtime.protocol import AttnModel

__all__ = ["AttentionModel", "AttnModel", "IOInfo", "ModelSet", "open_model"]
