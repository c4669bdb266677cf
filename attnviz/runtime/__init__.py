"""onnx + onnxruntime engine (no Qt, no torch): open a model (a file or an export folder), find its attention, run it."""

from attnviz.runtime.folder import ModelSet, open_model
from attnviz.runtime.model import AttentionModel, IOInfo

__all__ = ["AttentionModel", "IOInfo", "ModelSet", "open_model"]
