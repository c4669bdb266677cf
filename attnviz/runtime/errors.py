"""Errors shared by the runtime modules (kept apart so that no module needs to import model.py for them)."""

from __future__ import annotations

from attnviz import AttnvizError


class Cancelled(AttnvizError):
    """The caller's ``cancelled()`` returned True between generation steps."""


def ort_message(e: Exception) -> str:
    """onnxruntime's message without its ``[ONNXRuntimeError] : 2 : ...`` prefix, on one line."""
    s = str(e).strip().replace("\n", " ")
    for marker in ("] ", ": "):
        if s.startswith("[ONNXRuntimeError]") and marker in s:
            s = s.split(marker, 2)[-1]
            break
    return s[:240]
