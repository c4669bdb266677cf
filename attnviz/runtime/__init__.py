"""onnx + onnxruntime engine (no Qt, no torch): open a model, find its attention, run it."""

from attnviz.runtime.model import AttentionModel, IOInfo, open_model

__all__ = ["AttentionModel", "IOInfo", "open_model"]
