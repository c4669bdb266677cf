"""Errors shared by the runtime modules (kept apart so that no module needs to import model.py for them)."""

from __future__ import annotations

import math
import re

from attnviz import AttnvizError
from attnviz.core import limits
from attnviz.core.setting_words import fix


class Cancelled(AttnvizError):
    """The caller's ``cancelled()`` returned True (between generation steps, between items, or while onnxruntime
    ran): the one type every layer raises and the window recognises as "stop quietly", never as an error."""


# onnxruntime's own prefix, "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : ", and the exception's class name before
# it where the crash-isolation child reports it ("InvalidArgument: [ONNXRuntimeError] ...")
_ORT_CODE = re.compile(r"(?:\b[A-Z]\w*:\s*)?\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*[A-Z_]+\s*:\s*")
# where a C++ check fired, "/onnxruntime_src/.../reshape_helper.h:91", with the function it fired in
# ("onnxruntime::ReshapeHelper::ReshapeHelper(const onnxruntime::TensorShape&, ...) ") and the failed condition
# ("input_shape_size == requested_shape_size was false. "): none of it tells a user what to change
_CPP_PLACE = re.compile(
    r"\S+\.(?:cc|cpp|cxx|c|h|hpp|cu|cuh):\d+\s+"
    r"(?:[\w:*&<>, ~]*::[\w~]+\([^()]*\)(?:\s*const)?\s+)?"
    r"(?:[^.]*? was false\.\s*)?"
)
MAX_CHARS = 240
# the child's shared arena refusing past the memory cap (runtime/worker.py: max_mem), for what the shape estimate
# could not size (a shape read from the data)
_ARENA_FULL = re.compile(r"Available memory of (\d+) is smaller than requested bytes of (\d+)")


def ort_message(e: BaseException) -> str:
    """onnxruntime's message as one line for a user: without its ``[ONNXRuntimeError] : 2 : CODE :`` prefix,
    without C++ file:line locations and function signatures, at most :data:`MAX_CHARS` characters.

    The one cleaner for onnxruntime's words, whether they come from loading a graph or running it, in this
    process or in the crash-isolation child."""
    s = " ".join(str(e).split())
    full = _ARENA_FULL.search(s)
    if full:
        left, asked = (int(x) for x in full.groups())
        if limits.beyond_any_machine(asked):  # no cap worth raising: what lowers the need
            return (
                f"it asked for {limits.size_text(asked)} at once, more memory than any machine has; {fix('lower_need')}"
            )
        gb = math.ceil(limits.memory_cap()[0] / limits.GB + asked / limits.GB)
        return (
            f"it asked for {limits.size_text(asked)} at once with {limits.size_text(left)} of the memory cap left; "
            f"{fix('raise_cap', gb=gb)} if this machine has the memory"
        )
    s = _ORT_CODE.sub("", s)
    s = _CPP_PLACE.sub("", s).strip()
    return s if len(s) <= MAX_CHARS else s[: MAX_CHARS - 1] + "…"
