"""What the window runs in its worker threads: open a model, analyze an input, render and save a figure."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from attnviz import AttnvizError
from attnviz.runtime.errors import ort_message
from attnviz.runtime.sample import require_input

if TYPE_CHECKING:
    from attnviz.core.attention import AttentionResult
    from attnviz.runtime.request import AnalyzeRequest


def open_model_ready(
    path, provider: str = "auto", tokenizer: str | None = None, probe: bool = True, variant: str | None = None
):
    """Open with the runtime and also start the session and read head counts now, so the GUI thread never
    waits on onnxruntime. A graph onnxruntime refuses is one line naming the file.

    ``probe=False`` when a real run follows at once (the window always runs the given or a sample input after
    opening): that run settles labels and head counts, so a dummy run before it would only double the wait."""
    from attnviz.runtime import open_model
    from attnviz.runtime.device import asks_cuda
    from attnviz.runtime.host import prestart

    # the isolation child loads onnxruntime while the graph is read and its attention found, and where the
    # sessions will ask for CUDA makes the device's context meanwhile, as extract's child does (runtime/cuda_warm.py)
    prestart(cuda=asks_cuda(path, provider))
    m = open_model(path, provider=provider, tokenizer=tokenizer, variant=variant)
    if not m.sites:
        return m  # nothing to run; the window explains why
    try:
        _ = m.provider  # creates the inference session
    except AttnvizError:
        raise
    except Exception as e:  # onnxruntime refuses the graph (IR version, unsupported op, ...)
        raise AttnvizError(f"{Path(path).name}: onnxruntime cannot load this model: {ort_message(e)}") from None
    if probe and not all(s.heads for s in m.sites):
        m.probe()
    return m


def analyze(
    model,
    req: AnalyzeRequest,
    progress: Callable[[int, str], None] | None = None,
    cancelled=None,
) -> AttentionResult:
    """Run the input panel's request off the GUI thread, then the overview's max-pooled thumbnails, so the GUI
    thread only draws them.  The request was checked when the panel built it (the CLI's flags get the same check).
    A refusal names its fix in the words of who runs it: the window's worker pool runs every job under its own
    wording (gui/workers.py: the input panel's fields, the flags for ``open --screenshot``)."""
    from attnviz.core.view import THUMB, thumbnails

    require_input(req, model.path)
    if progress is not None:
        progress(-1, "running the model…" if not req.generate else f"generating {req.generate} steps…")
    t0 = time.perf_counter()
    result = model.analyze_request(req, progress=progress, cancelled=cancelled)
    result.info.setdefault("timings", {})
    if isinstance(result.info["timings"], dict):
        result.info["timings"].setdefault("analyze (wall)", time.perf_counter() - t0)
    if progress is not None:
        progress(-1, "preparing thumbnails…")
    thumbnails(result, -1, THUMB)  # kept with the result: the overview's first draw pools nothing
    return result
