"""Where a model's sessions run, known before any session exists (a corpus worker's statistics graph is laid out for
its device: graph_reduce.InGraphReducer joins the sites on CUDA; and what earlier commands kept for a worker is read
back only where the device is known).  Plain Python: the corpus driver asks before it imports numpy
(corpus/prestart.py, ``kept=False``)."""

from __future__ import annotations

from pathlib import Path


def before_session(model: str | Path, provider: str, kept: bool = True) -> str | None:
    """Where the sessions of ``model`` asked for on ``provider`` run, known before any session exists: "cpu",
    "cuda", or None where only a session can tell.  ``cuda`` runs on CUDA or stops (runtime/session.py refuses a
    CPU fallback), ``cpu`` on the CPU, ``auto`` on the CPU without an NVIDIA GPU or with an onnxruntime build that
    has no CUDA provider (runtime/ort_build.py; session.py then makes CPU sessions only).  ``auto`` with both
    lands on CUDA or, its CUDA libraries missing, on the CPU: where a worker's probe of this file with this build
    and a GPU present landed on CUDA (runtime/light_model.py :func:`landed`; ``kept``: where this is looked up), it
    runs there again; should CUDA then fail, that worker opens the model as ``auto`` does (on the CPU) and the
    record is forgotten."""
    from attnviz.runtime import ort_build
    from attnviz.runtime.isolation import gpu_present

    if provider in ("cpu", "cuda"):
        return provider
    if provider != "auto":
        return None
    if not gpu_present():
        return "cpu"
    build = ort_build.installed()
    if build is not None and not ort_build.has_cuda(build):
        return "cpu"  # a CPU-only build (pip's onnxruntime) on a GPU machine
    if not kept:
        return None
    from attnviz.runtime.light_model import landed  # (numpy: not in the driver's prestart)

    return landed(model)


def asks_cuda(model: str | Path, provider: str) -> bool:
    """Whether a session of ``model`` on ``provider`` will ask for CUDA (known before numpy is imported): ``cuda``, or
    ``auto`` with a GPU and a CUDA build of onnxruntime present.  (``auto`` whose CUDA libraries turn out missing
    asks too, and lands on the CPU.)"""
    return provider == "cuda" or (provider == "auto" and before_session(model, "auto", kept=False) is None)
