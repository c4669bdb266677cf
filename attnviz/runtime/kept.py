"""On-demand maps' Q and Kᵀ kept where onnxruntime wrote them, a head's map computed there when it is asked for.

An on-demand run (``--mode ondemand``) returns each site's Q and Kᵀ instead of its ``[B, H, T, T]`` map.  On CUDA
bringing them to the host is most of what the run costs beyond plain inference (MiniLM's shape at 4,096 tokens:
69 MB through PCIe a run, 1.17× plain on an H100, bench/RESULTS.md).  Where this module's switch says so the run
binds them to the session's device instead (IO binding, as :class:`attnviz.runtime.steps.DeviceRun` keeps a
generation's cache), and a head's probabilities are computed on that device by a small session of the site's
head model (:func:`attnviz.runtime.graph.head_model`: the head's rows gathered, Q·Kᵀ, the graph's own epilogue),
so only the ``[rows, Tk]`` asked for crosses back.

Ownership: a kept value lives as long as something holds it.  In-process that is the :class:`Kept` wrapper the
run returned; in the crash-isolation child it is a :class:`KeptRef` the parent holds, whose collection tells the
child (with the next request) to drop the value.  A result kept beside a newer run therefore still draws.

Imported by the child (``worker.py``): numpy and :mod:`attnviz.runtime.isolation`'s neighbours only, onnxruntime
where a run binds.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import numpy as np

from attnviz import AttnvizError

KEEP_ENV = "ATTNVIZ_QK_DEVICE"  # auto (AUTO_KEEPS) | on (keep on the device, the CPU too) | off (Q and Kᵀ to the host)
_MODES = ("auto", "on", "off")
# onnxruntime's type words for the dtypes a kept value can have: Q/Kᵀ's floats, and the epilogue's side inputs'
# (an additive mask's float, a boolean mask, an integer one); anything else comes to the host as before
_TYPES = {
    "tensor(float)": "<f4",
    "tensor(float16)": "<f2",
    "tensor(double)": "<f8",
    "tensor(bool)": "|b1",
    "tensor(int64)": "<i8",
    "tensor(int32)": "<i4",
}
KEPT_TYPES = _TYPES  # read by the child (worker_kept.py), which checks a run's kept values against a prediction

# a head model's own inputs (:func:`attnviz.runtime.graph.head_model`; a prefix no exported graph uses), beside
# its epilogue's side inputs, which keep their names
Q, K = "attnviz_head_q", "attnviz_head_k"
Q_SHAPE, K_SHAPE = "attnviz_head_q_shape", "attnviz_head_k_shape"  # int64 [3]: [-1, *Q's last two axes]
Q_INDEX, K_INDEX = "attnviz_head_q_index", "attnviz_head_k_index"  # int64 [n]: the heads along the flat axis
ROWS = "attnviz_head_rows"  # int64 [r]: the query rows asked for
SCORES_SHAPE = "attnviz_head_scores_shape"  # int64 [4]: [1, n, r, Tk], as the epilogue is fed on the host
# the pooling twin's (``head_model(pool=True)``): its output and the lengths it is fed (:func:`pool_feeds`)
THUMBS = "attnviz_pool_thumbs"  # [n, R, C]: each head's rows max-pooled
POOL_ENDS = "attnviz_pool_ends"  # int64 [1]: the keys kept (a step's)
POOL_PADS = "attnviz_pool_pads"  # int64 [8]: zeros padding rows and keys to whole runs
POOL_ROWS, POOL_COLS = "attnviz_pool_rows_shape", "attnviz_pool_cols_shape"  # int64 [4]: the runs laid out
# an epilogue side input kept beside Q and Kᵀ (a padded batch's mask: [B, 1, T, T] float32, 67 MB at 4,096 tokens,
# whose copy to the host was ~6 ms of a 16 ms H100 run) is fed to the head model whole, and the head model picks
# the batch row, heads and query rows a request asks for itself (:func:`side_feeds`), as the host slices it
SIDE_TAGS = ("value", "shape", "rows_of_batch", "heads", "rows")


def side_input(name: str, tag: str) -> str:
    """The head model's input ``tag`` (:data:`SIDE_TAGS`) for the kept side input ``name``."""
    return f"attnviz_side_{tag}:{name}"


def side_feeds(name: str, shape: tuple[int, ...], batch: int, heads: int, tq: int, b: int, h0: int, h1: int) -> dict:
    """The index feeds of kept side input ``name`` (of ``shape``, any rank up to 4, read right-aligned as
    ``[B, H, Tq, Tk]``) for batch row ``b`` and heads ``h0:h1``: what KeptMap's host slicing of a side array
    picks (its batch row where it has one per row, else the first; its heads where it has one per head, else the
    first).  The rows are fed per request (``side_rows``)."""
    s4 = (1,) * (4 - len(shape)) + tuple(int(d) for d in shape)
    return {
        side_input(name, "shape"): np.array(s4, np.int64),
        side_input(name, "rows_of_batch"): np.array([b if s4[0] == batch and batch > 1 else 0], np.int64),
        side_input(name, "heads"): np.arange(h0, h1, dtype=np.int64)
        if s4[1] == heads and heads > 1
        else np.zeros(1, np.int64),
    }


def side_rows(shape: tuple[int, ...], tq: int, r0: int, r1: int) -> np.ndarray:
    """The query rows ``r0:r1`` of a kept side input of ``shape`` (all of its rows where it has not one per query)."""
    rows = int(shape[-2]) if len(shape) >= 2 else 1
    return np.arange(r0, r1, dtype=np.int64) if rows == tq and tq > 1 else np.arange(rows, dtype=np.int64)


# ATTNVIZ_HELPER_ARENA=1: the site sessions are made as before memkept14 (on CUDA each keeps its arena's peak: 12.5 GB
# of an H100 after MiniLM's overview at 2,048 tokens; in-process each its own CPU arena), for bench/ondemand_qk_ab.py
# to compare
HELPER_ARENA_ENV = "ATTNVIZ_HELPER_ARENA"


def helper_arena() -> bool:
    """Whether a site's head-model sessions are made as other sessions are (default: no, as helpers: session.py)."""
    return os.environ.get(HELPER_ARENA_ENV) == "1"


def pool_feeds(n: int, rows: int, n_k: int, fq: int, fk: int) -> dict[str, np.ndarray]:
    """The pooling twin's lengths for ``n`` heads' ``rows`` query rows (whole runs of ``fq`` but perhaps the
    last block's) over their first ``n_k`` keys, pooled in runs of ``fq`` rows and ``fk`` keys."""
    r_cells, c_cells = -(-rows // fq), -(-n_k // fk)
    return {
        POOL_ENDS: np.array([n_k], np.int64),
        POOL_PADS: np.array([0, 0, 0, 0, 0, 0, r_cells * fq - rows, c_cells * fk - n_k], np.int64),
        POOL_ROWS: np.array([n, r_cells, fq, c_cells * fk], np.int64),
        POOL_COLS: np.array([n, r_cells, c_cells, fk], np.int64),
    }


def keep_mode(mode: str | None = None) -> str:
    """The switch's value (``mode``, else the ``ATTNVIZ_QK_DEVICE`` environment variable, else "auto"), checked."""
    got = mode if mode is not None else os.environ.get(KEEP_ENV, "auto") or "auto"
    if got not in _MODES:
        raise AttnvizError(f"{KEEP_ENV}={got!r} is not a Q/K placement; use one of {', '.join(_MODES)}")
    return got


# "auto" keeps Q and Kᵀ on the device where that was measured to pay.  CUDA: measured on an H100 (session 14,
# bench/gpu/run_kept.sh, bench/RESULTS.md): cuBLAS's heads within 1.75e-10 of the host recompute; an isolated run at
# 4,096 tokens costs the same as bringing Q/Kᵀ to the host (kept / host wall 0.96x, CPU 1.00x) and a drawn head
# comes back 6x sooner (28 ms against 170; in-process 13 against 121, for runs 1.12x the host's).  On a CPU the copy
# out is a memcpy the run barely notices, so the CPU keeps the host path.
AUTO_KEEPS: frozenset[str] = frozenset({"CUDAExecutionProvider"})


def keep_device(provider: str, mode: str) -> str:
    """Where a session whose first provider is ``provider`` keeps Q and Kᵀ: "" to the host as numpy arrays (the
    default: on a CPU the copy out is a memcpy the run barely notices); with "on", "cuda" on CUDA and "cpu"
    elsewhere (CPU OrtValues through the same code: how the tests run the CUDA path without a GPU); with "auto",
    on the device for the providers in :data:`AUTO_KEEPS`."""
    if mode == "off" or (mode == "auto" and provider not in AUTO_KEEPS):
        return ""
    return "cuda" if provider == "CUDAExecutionProvider" else "cpu"


def device_id(sess, device: str) -> int:
    """The session's own GPU (0 on the CPU)."""
    if device != "cuda":
        return 0
    opts = sess.get_provider_options().get("CUDAExecutionProvider", {})
    return int(opts.get("device_id", 0) or 0)


def tensor_dtype(word: str) -> str:
    """A NodeArg's type word (``tensor(float16)``) as a numpy dtype string (float32 for one not kept)."""
    return _TYPES.get(word, "<f4")


def ort_dtype(ov) -> np.dtype | None:
    """A tensor OrtValue's numpy dtype, None for one this module does not keep."""
    word = _TYPES.get(ov.data_type())
    return np.dtype(word) if word else None


class HelperMemory(NamedTuple):
    """How a site's head-model session holds memory, read back from onnxruntime (:func:`helper_memory`)."""

    cpu_arena: bool  # a CPU arena (SessionOptions.enable_cpu_mem_arena)
    env_allocators: bool  # the process's shared one (session.use_env_allocators: runtime/arena.py)
    cuda_extend: str  # the CUDA provider's arena_extend_strategy ("" on the CPU)
    release: str  # the run option a request runs with (memory.enable_memory_arena_shrinkage; "" none)


def helper_memory(sess) -> HelperMemory:
    """What onnxruntime says of ``sess``'s memory (tests, and benches on a GPU, check a helper's)."""
    from attnviz.runtime.session import SHRINK, release_options

    so = sess.get_session_options()
    try:
        env = so.get_session_config_entry("session.use_env_allocators") == "1"
    except RuntimeError:  # onnxruntime raises for a key never set
        env = False
    opts = release_options(sess)
    try:
        release = opts.get_run_config_entry(SHRINK) if opts is not None else ""
    except RuntimeError:
        release = ""
    cuda = sess.get_provider_options().get("CUDAExecutionProvider", {})
    return HelperMemory(bool(so.enable_cpu_mem_arena), env, str(cuda.get("arena_extend_strategy", "")), release)


class Kept:
    """An OrtValue kept in this process (``ATTNVIZ_INPROCESS=1``), with the dtype and shape a map reads."""

    __slots__ = ("value", "dtype", "shape")

    def __init__(self, value, dtype: np.dtype):
        self.value, self.dtype, self.shape = value, dtype, tuple(int(d) for d in value.shape())

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


class KeptRef:
    """A value the crash-isolation child keeps for this process (its id there, dtype and shape); when this object
    is collected the child is told, with the next request, to drop the value."""

    __slots__ = ("host", "kid", "dtype", "shape", "__weakref__")

    def __init__(self, host, kid: int, dtype: str, shape: tuple):
        self.host, self.kid, self.dtype, self.shape = host, kid, np.dtype(dtype), tuple(shape)

    def __del__(self) -> None:
        # a __del__ rather than weakref.finalize: ~0.4 us a value made where a finalizer costs ~2.3 us (measured;
        # an on-demand run makes 27), and it needs no registry.  list.append: atomic, safe from any thread's
        # collection.  A KeptRef is in no reference cycle (its host holds none), so it goes when its map goes.
        self.host.forget.append(self.kid)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def bind_run(sess, names: list[str], feeds: dict, keep: frozenset[str], device: str, dev: int) -> list:
    """An in-process run with the ``keep`` outputs bound to ``device`` (returned as :class:`Kept`) and the others
    to host memory (numpy arrays, as :func:`attnviz.runtime.chain.run_bound` gives them)."""
    io = sess.io_binding()
    for k, v in feeds.items():
        io.bind_cpu_input(k, np.ascontiguousarray(v))
    uniq = list(dict.fromkeys(names))
    for n in uniq:
        if n in keep:
            io.bind_output(n, device, dev)
        else:
            io.bind_output(n, "cpu")
    sess.run_with_iobinding(io)
    got = {}
    for n, ov in zip(uniq, io.get_outputs()):
        dt = ort_dtype(ov) if n in keep else None
        got[n] = Kept(ov, dt) if dt is not None else ov.numpy()
    return [got[n] for n in names]


def head_run(sess, names: list[str], feeds: dict, values: dict[str, Any], into: dict[str, np.ndarray]) -> list:
    """A head model's run: ``values`` (input -> OrtValue: the kept Q and Kᵀ, wherever they are) bound as they are,
    ``feeds`` (numpy) bound from host memory, each output written into host memory: into its array in ``into``
    (the child's page-locked slot, shaped as the caller expects) or where onnxruntime puts it.  A shape that was
    not what the caller expected runs again unbound.  Returns the outputs in ``names`` order (an ``into`` array
    itself where it was written).  ``sess`` is a helper (``make_session(helper=True)``): on CUDA each run gives back
    the GPU memory it grew when it ends (:func:`attnviz.runtime.session.release_options`), so a dozen sites'
    sessions hold one request's worth while it runs, not each its peak for good."""
    from attnviz.runtime.session import release_options

    io = sess.io_binding()
    for k, v in values.items():
        io.bind_ortvalue_input(k, v)
    for k, v in feeds.items():
        io.bind_cpu_input(k, np.require(v, requirements="C"))  # rank 0 stays rank 0 (a head's index)
    for n in names:
        arr = into.get(n)
        if arr is not None:
            io.bind_output(n, "cpu", 0, arr.dtype.type, list(arr.shape), arr.ctypes.data)
        else:
            io.bind_output(n, "cpu")
    try:
        sess.run_with_iobinding(io, release_options(sess))
    except Exception:
        if not into:
            raise
        return head_run(sess, names, feeds, values, {})  # onnxruntime says what else was wrong, if anything
    return [into[n] if n in into else ov.numpy() for n, ov in zip(names, io.get_outputs())]
