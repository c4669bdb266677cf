"""onnxruntime sessions: provider choice, the provider actually used, no spin-waiting."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import onnxruntime as ort

from attnviz import AttnvizError
from attnviz.core.setting_words import fix
from attnviz.runtime.isolation import PROVIDERS, gpu_present  # here without onnxruntime: the parent uses them

if TYPE_CHECKING:  # (the cache's module and cuda_kept are imported where used: a CPU session needs neither)
    from attnviz.runtime.optcache import GraphKey

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
# TF32 matmuls (onnxruntime's CUDA default) put attention maps up to 5.5e-3 away from the CPU's on MiniLM (H100,
# bench/gpu_bench.py); with TF32 off they agree within 8e-6, and a viewer of attention weights wants the weights.
CUDA_OPTIONS = {"use_tf32": "0"}
# a helper session (``helper=True``: a kept site's head model or pooling twin, runtime/kept.py) holds GPU memory only
# while a request runs: its CUDA arena grows by exactly what a request asks (not the next power of two) and
# :func:`release_options` has each request give that back when it ends.  Before, each of a MiniLM overview's dozen
# helper sessions kept its arena's peak: 12.5 GB of an H100 at 2,048 tokens (bench/RESULTS.md, session 14).  Their
# CPU memory is one arena shared by every helper (the caller's ``shared_arena``): no arena at all would give it back
# too, but paid for in page faults (1.6x the CPU time of an overview at 2,048 tokens, memkept14).
CUDA_HELPER_OPTIONS = {**CUDA_OPTIONS, "arena_extend_strategy": "kSameAsRequested"}
CUDA_UNUSABLE = "CUDA provider unavailable (no GPU or CUDA libraries); running on CPU"  # ``auto``'s note then
SHRINK = "memory.enable_memory_arena_shrinkage"  # run option: the listed arenas free their unused regions at the end


def session_options(threads: int | None = None, arena: bool = True) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.enable_cpu_mem_arena = arena  # off for small helper sessions: the arena would keep their peak forever
    # spin-waiting threads steal the cores of a GUI / torch in the same process (measured 2-7x slowdowns);
    # ATTNVIZ_SPIN=1 turns onnxruntime's default spinning back on (bench/engine_memory_bench.py --spin compares)
    spin = "1" if os.environ.get("ATTNVIZ_SPIN") == "1" else "0"
    so.add_session_config_entry("session.intra_op.allow_spinning", spin)
    so.add_session_config_entry("session.inter_op.allow_spinning", spin)
    threads = threads or default_threads()
    if threads:
        so.intra_op_num_threads = int(threads)
    so.log_severity_level = 4  # failures become one-line AttnvizErrors; the C++ log would repeat them on stderr
    return so


def make_session(
    model: bytes | str,
    provider: str = "auto",
    threads: int | None = None,
    arena: bool = True,
    external_dir: str | None = None,
    shared_arena: bool = False,
    optimized: GraphKey | None = None,
    helper: bool = False,
) -> tuple[ort.InferenceSession, str]:
    """Create a session; return it and a note when the provider differs from what was asked.  ``optimized``: a
    :func:`attnviz.runtime.optcache.graph_key` of ``model``: on the CPU its optimised graph is read from the cache
    (optimisation then skipped) or kept there for the next session of the same graph.  ``helper``: a small session
    beside another's kept values (:data:`CUDA_HELPER_OPTIONS`, run with :func:`release_options`)."""
    if provider not in PROVIDERS:
        raise AttnvizError(f"unknown provider {provider!r}; use one of {', '.join(PROVIDERS)}")
    available = ort.get_available_providers()
    note = ""
    want_cuda = provider == "cuda" or (provider == "auto" and CUDA in available and gpu_present())
    # ``auto`` where an earlier session with this onnxruntime, driver and library path landed on the CPU: not asked
    # again (runtime/cuda_kept.py; ``cuda`` always asks, and refuses in one line when CUDA fails)
    if want_cuda:
        from attnviz.runtime import cuda_kept
    known = provider == "auto" and want_cuda and cuda_kept.unusable()
    want_cuda = want_cuda and not known
    if provider == "cuda" and CUDA not in available:
        raise AttnvizError(
            f"CUDA was requested but this onnxruntime has no CUDA provider; install onnxruntime-gpu or {fix('cpu')}"
        )
    so = session_options(threads, arena)
    if arena and shared_arena:  # the process-wide arena the crash-isolation child registers (runtime/worker.py)
        so.add_session_config_entry("session.use_env_allocators", "1")
    if external_dir:  # a model given as bytes reads its external weights from here
        so.add_session_config_entry("session.model_external_initializers_file_folder_path", external_dir)
    if want_cuda:
        sess = _cuda_session(model, so, CUDA_HELPER_OPTIONS if helper else CUDA_OPTIONS)
        if sess.get_providers()[0] != CUDA:
            if provider == "cuda":
                raise AttnvizError(
                    "CUDA was requested but onnxruntime could not use it (CUDA/cuDNN libraries missing or no GPU); "
                    f"{fix('cpu')}, or install the CUDA 12/13 runtime wheels"
                )
            cuda_kept.keep_unusable()
            note = CUDA_UNUSABLE
        elif provider == "cuda":
            cuda_kept.forget()  # CUDA works here now: ``auto`` asks again
        return sess, note
    if known:
        note = CUDA_UNUSABLE
    elif provider == "auto" and CUDA in available:
        note = "no NVIDIA GPU found; running on CPU"
    entry = None
    if optimized is not None:
        from attnviz.runtime.optcache import optimized_path

        entry = optimized_path(optimized, ort.__version__)
    sess = _kept(model, so, entry) if entry is not None else ort.InferenceSession(model, so, providers=[CPU])
    return sess, note


def _cuda_session(model: bytes | str, so: ort.SessionOptions, options: dict) -> ort.InferenceSession:
    """A session asked for on CUDA, the CPU after it: onnxruntime-gpu falls back to the CPU silently (only a log
    line) when the CUDA libraries are missing, so the caller reads the provider it got.  The loader's noise is
    kept quiet."""
    try:
        ort.preload_dlls()  # finds CUDA/cuDNN from nvidia-* pip wheels when present
    except Exception:
        pass
    prev = _quiet()
    try:
        return ort.InferenceSession(model, so, providers=[(CUDA, options), CPU])
    finally:
        _restore(prev)


def release_options(sess) -> ort.RunOptions | None:
    """Run options that make a helper session (``helper=True``: its CUDA arena grows by what is asked) give back
    the GPU memory a run grew, when the run ends; None for any other session, and on the CPU, where the helpers
    share one arena instead.  ("cpu" is not listed: the shared CPU arena keeps what the next request needs.)"""
    if sess.get_providers()[:1] != [CUDA]:
        return None
    opts = sess.get_provider_options().get(CUDA, {})
    if opts.get("arena_extend_strategy") != CUDA_HELPER_OPTIONS["arena_extend_strategy"]:
        return None
    run = ort.RunOptions()
    run.add_run_config_entry(SHRINK, f"gpu:{int(opts.get('device_id', 0) or 0)}")
    return run


def _kept(model: bytes | str, so: ort.SessionOptions, entry: str) -> ort.InferenceSession:
    """A CPU session of ``model`` from its optimised graph kept at ``entry`` (graph optimisation off: onnxruntime
    made that graph from ``model`` with these options), else made as usual with that graph written there."""
    from attnviz.core.writes import atomic_path
    from attnviz.runtime.optcache import optimized_written, used

    try:
        with open(entry, "rb") as f:
            kept = f.read()
    except OSError:
        kept = None
    if kept is not None:
        level = so.graph_optimization_level
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            sess = ort.InferenceSession(kept, so, providers=[CPU])
            used(entry)
            return sess
        except Exception:  # damaged or not onnxruntime's: made and written again below
            so.graph_optimization_level = level
    try:
        os.makedirs(os.path.dirname(entry), exist_ok=True)
        with atomic_path(entry) as written:  # onnxruntime writes its graph there; renamed once the session is made
            so.optimized_model_filepath = str(written)
            sess = ort.InferenceSession(model, so, providers=[CPU])
            from attnviz.runtime.optgraph import unique_subgraph_names

            unique_subgraph_names(str(written))  # else a graph with an If may not load back (optgraph.py)
    except Exception:  # the folder or the write failed (a model over 2 GB cannot be written in one piece): as usual
        so.optimized_model_filepath = ""
        return ort.InferenceSession(model, so, providers=[CPU])
    optimized_written(entry)
    return sess


def _quiet():
    ort.set_default_logger_severity(4)
    return 2


def _restore(prev):
    ort.set_default_logger_severity(prev)


THREADS_ENV = "ATTNVIZ_THREADS"


def default_threads() -> int | None:
    """onnxruntime's intra-op threads for a session whose caller names none: :data:`THREADS_ENV` where set (benches
    pin attnviz to the threads of the plain script they compare with), else None (onnxruntime's default)."""
    from attnviz.core.limits import env_count

    return env_count(THREADS_ENV, "onnxruntime's threads per session")
