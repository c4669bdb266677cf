"""What the window runs in its worker threads: open a model, analyze an input, render and save a figure."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnviz import AttnvizError


def open_model_ready(path, provider: str = "auto", tokenizer: str | None = None, probe: bool = True):
    """Open with the runtime and also start the session and read head counts now, so the GUI thread never
    waits on onnxruntime. A graph onnxruntime refuses is one line naming the file.

    ``probe=False`` when a real run follows at once (the window always runs the given or a sample input after
    opening): that run settles labels and head counts, so a dummy run before it would only double the wait."""
    from attnviz.runtime import open_model
    from attnviz.runtime.host import prestart

    prestart()  # the isolation child loads onnxruntime while the graph is read and its attention found
    m = open_model(path, provider=provider, tokenizer=tokenizer)
    if not m.sites:
        return m  # nothing to run; the window explains why
    try:
        _ = m.provider  # creates the inference session
    except AttnvizError:
        raise
    except Exception as e:  # onnxruntime refuses the graph (IR version, unsupported op, ...)
        raise AttnvizError(f"{Path(path).name}: onnxruntime cannot load this model: {ort_reason(e)}") from None
    if probe and not all(s.heads for s in m.sites):
        m.probe()
    return m


def ort_reason(e: BaseException) -> str:
    """The readable tail of an onnxruntime exception (it prefixes its own codes and the C++ location)."""
    msg = str(e).replace("\n", " ")
    msg = msg.split(" : ")[-1].split(") ")[-1].strip() if "ONNXRuntimeError" in msg else msg
    return msg[:200]


RUN_KEYS = ("text", "text_pair", "image", "generate")
OPTIONAL_KEYS = ("max_tokens", "image_mean", "image_std", "image_size")  # passed only when the user set them


def analyze_kwargs(model, values: dict, progress=None, cancelled=None) -> dict[str, Any]:
    """The keyword arguments ``model.analyze`` gets for the input panel's ``values``; progress / cancel and the
    optional settings only where the runtime's signature takes them (a .npz-backed or fake model may not)."""
    kwargs: dict[str, Any] = {k: values.get(k) for k in RUN_KEYS}
    kwargs["generate"] = int(kwargs.get("generate") or 0)
    try:
        params = inspect.signature(model.analyze).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]  # a builtin without a signature: pass only the input
    for name, fn in (("progress", progress), ("cancelled", cancelled)):
        if fn is not None and name in params:
            kwargs[name] = fn
    for k in OPTIONAL_KEYS:
        if values.get(k) and k in params:
            kwargs[k] = values[k]
    return kwargs


def analyze(model, values: dict, progress: Callable[[int, str], None] | None = None, cancelled=None):
    """Run one analysis off the GUI thread, then the overview's max-pooled thumbnails, so the GUI thread only
    draws them."""
    from attnviz.core.view import THUMB, thumbnails

    kwargs = analyze_kwargs(model, values, progress, cancelled)
    if progress is not None:
        progress(-1, "running the model…" if not kwargs["generate"] else f"generating {kwargs['generate']} steps…")
    t0 = time.perf_counter()
    result = model.analyze(**kwargs)
    result.info.setdefault("timings", {})
    if isinstance(result.info["timings"], dict):
        result.info["timings"].setdefault("analyze (wall)", time.perf_counter() - t0)
    if progress is not None:
        progress(-1, "preparing thumbnails…")
    result.gui_thumbnails = thumbnails(result, -1, THUMB)
    return result


def render_and_save(result, view, selection, path, figure_style=None):
    """Draw ``view`` of ``result`` for the view model's ``selection`` with :mod:`attnviz.figures` and write it
    atomically."""
    from attnviz.figures import render_figure, save_figure

    fig = render_figure(result, view, selection, figure_style)
    return save_figure(fig, path)
