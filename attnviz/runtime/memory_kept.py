"""The onnx-free half of a session's memory check (:mod:`attnviz.runtime.memory`): estimates asked by shape,
remembered per session and kept on disk, and the check before each run (:func:`check_run`).

:class:`EstimateCache` holds what every plan shares; :class:`attnviz.runtime.memory.MemoryPlan` adds the parsed
graph that works an estimate out (onnx's shape inference).  :class:`KeptPlan` is a plan made from what a
:class:`~attnviz.runtime.memory.MemoryPlan` says of its graph before any estimate (:class:`PlanHead`: the
weights' bytes, which axes the inputs fix, onnx's version), kept with a corpus worker's statistics session
(runtime/light_model.py): its estimates are read back from disk as the full plan's are, and only one that is not
there parses the graph (then onnx is imported, as before).  A second command's worker so checks its runs without
importing onnx.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnviz.core import limits
from attnviz.core.setting_words import fix
from attnviz.runtime.optcache import GraphKey

_CACHE = 64  # estimates remembered per session (by the shapes fed)
BUCKET_MIN = 64  # open axes shorter than this are estimated at this length (EstimateCache.estimate)
# numpy dtypes as ONNX's element types (onnx.helper.np_dtype_to_tensor_dtype's, tests/runtime/test_light_model.py);
# any other dtype asks onnx
ELEM_TYPES = {
    np.dtype("float32"): 1,
    np.dtype("uint8"): 2,
    np.dtype("int8"): 3,
    np.dtype("uint16"): 4,
    np.dtype("int16"): 5,
    np.dtype("int32"): 6,
    np.dtype("int64"): 7,
    np.dtype("bool"): 9,
    np.dtype("float16"): 10,
    np.dtype("float64"): 11,
    np.dtype("uint32"): 12,
    np.dtype("uint64"): 13,
}


@dataclass(frozen=True)
class Estimate:
    bytes: int  # the peak: weights + everything alive at once
    weights: int
    largest: tuple[str, tuple[int, ...], str, int]  # (tensor, shape, dtype, bytes) of the largest single tensor

    def detail(self) -> str:
        name, shape, dtype, n = self.largest
        if n * 4 < self.bytes:
            return ""
        return f" (tensor {name!r} {list(shape)} {dtype} alone is {limits.size_text(n)})"


@dataclass(frozen=True)
class PlanHead:
    """What a plan knows of its graph before any estimate: the weights' bytes, per fed input and axis whether the
    model fixes its size, and the onnx version whose shape inference made the estimates (their disk key names it)."""

    weights: int
    fixed: dict[str, list[bool]]
    onnx_version: str

    def to_json(self) -> dict:
        return {"weights": self.weights, "fixed": self.fixed, "onnx": self.onnx_version}

    @classmethod
    def from_json(cls, value: object) -> PlanHead | None:
        """The head :meth:`to_json` wrote, None where ``value`` is not one."""
        if not isinstance(value, dict):
            return None
        weights, fixed, version = value.get("weights"), value.get("fixed"), value.get("onnx")
        if type(weights) is not int or not isinstance(version, str) or not isinstance(fixed, dict):
            return None
        for axes in fixed.values():
            if not isinstance(axes, list) or not all(isinstance(a, bool) for a in axes):
                return None
        return cls(weights, {str(k): list(v) for k, v in fixed.items()}, version)


class EstimateCache:
    """A session's estimates by the shapes fed: remembered (:data:`_CACHE`), bucketed and kept on disk under
    ``keep`` (:func:`attnviz.runtime.optcache.graph_key`); :meth:`_estimate` works one out."""

    def __init__(self, head: PlanHead, keep: GraphKey | None):
        self.keep = keep
        self.weights = head.weights
        self.fixed = head.fixed
        self.onnx_version = head.onnx_version
        self.lock = threading.Lock()
        self.cache: dict[tuple, Estimate] = {}  # in insertion order: the oldest goes first
        # exact (feeds' names, shapes and dtypes; fetch) -> the cap a run of them was within: a repeated call's
        # check is one lookup (the shapes' tuples, buckets and sorted forms were ~0.1 ms of every run)
        self.passed: dict[tuple, int] = {}

    def outputs(self) -> list[str]:
        """The graph's outputs (what a run that names no fetch list fetches)."""
        raise NotImplementedError

    def _estimate(self, shapes: dict[str, tuple[tuple[int, ...], int]], keep: set[str], cap: int | None) -> Estimate:
        raise NotImplementedError

    def estimate(
        self, shapes: dict[str, tuple[tuple[int, ...], int]], keep: list[str], within: int | None = None
    ) -> Estimate:
        """The peak for feeds of ``shapes`` (name -> (shape, onnx element type)) when ``keep`` is fetched.

        With ``within`` (the cap), what is returned may be an upper bound instead, whenever that bound is within
        it: the estimate for the feeds with every axis the model leaves open rounded up to a power of two (at
        least :data:`BUCKET_MIN`), which shapes only grow.  So a corpus of many lengths or a generation that
        re-runs the model a token longer each step costs one shape inference per bucket (~20-35 ms on a
        700-node graph), not one per run; only a bound over the cap is worked out again exactly."""
        form = (tuple(sorted((k, len(s), t) for k, (s, t) in shapes.items())), tuple(sorted(set(keep))))
        if within is not None:
            bucket = {k: (self._bucket(k, s), t) for k, (s, t) in shapes.items()}
            est = self._cached(form, bucket, keep, within)
            if est.bytes <= within:
                return est
        return self._cached(form, shapes, keep, None)

    def _bucket(self, name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        fixed = self.fixed.get(name, ())
        return tuple(
            d if (a < len(fixed) and fixed[a]) or d <= 1 else max(BUCKET_MIN, 1 << (int(d) - 1).bit_length())
            for a, d in enumerate(shape)
        )

    def _cached(self, form: tuple, shapes: dict, keep: list[str], within: int | None) -> Estimate:
        dims = tuple(d for _, (s, _t) in sorted(shapes.items()) for d in s)
        with self.lock:
            hit = self.cache.get((form, dims))
            if hit is None and within is not None:  # an estimate for feeds at least as large on every axis
                hit = next(
                    (
                        e
                        for (f, d), e in self.cache.items()
                        if f == form and e.bytes <= within and all(a >= b for a, b in zip(d, dims))
                    ),
                    None,
                )
            if hit is not None:
                return hit
        est = self._kept(form, dims, within)
        if est is None:
            est = self._estimate(shapes, set(keep), within)
            self._keep(form, dims, within, est)
        with self.lock:
            self.cache[(form, dims)] = est
            while len(self.cache) > _CACHE:
                del self.cache[next(iter(self.cache))]
        return est

    def _disk_key(self, form: tuple, dims: tuple, within: int | None) -> GraphKey | None:
        """What an estimate depends on beyond the graph: the shapes (dims, in ``form``'s order) and fetch, the cap
        (near it the symbolic pass may run) and the versions of the two shape inferences."""
        if self.keep is None:
            return None
        import sys

        ort = sys.modules.get("onnxruntime")
        detail = (self.keep.key, form, dims, within, self.onnx_version, getattr(ort, "__version__", None))
        return GraphKey(self.keep.folder, repr(detail))

    def _kept(self, form: tuple, dims: tuple, within: int | None) -> Estimate | None:
        from attnviz.runtime import optcache

        key = self._disk_key(form, dims, within)
        got: Any = optcache.kept_json("memory", key) if key else None
        try:
            peak, weights, largest = got
            name, shape, dtype, n = largest
            est = Estimate(int(peak), int(weights), (str(name), tuple(int(d) for d in shape), str(dtype), int(n)))
        except (TypeError, ValueError):  # nothing kept, or not an estimate
            return None
        return est if est.weights == self.weights else None

    def _keep(self, form: tuple, dims: tuple, within: int | None, est: Estimate) -> None:
        from attnviz.runtime import optcache

        key = self._disk_key(form, dims, within)
        if key:
            optcache.keep_json("memory", key, [est.bytes, est.weights, list(est.largest)])


class KeptPlan(EstimateCache):
    """A plan from its :class:`PlanHead` (no graph parsed): estimates come from disk, and one that is not kept there
    is worked out by the full plan, made then by ``full`` (:class:`~attnviz.runtime.memory.MemoryPlan` of the graph:
    onnx imported then; passed in, as memory.py imports this module)."""

    def __init__(self, head: PlanHead, keep: GraphKey | None, full: Callable[[], EstimateCache]):
        super().__init__(head, keep)
        self._make_full = full
        self._full: EstimateCache | None = None

    def full(self) -> EstimateCache:
        """The full plan, made once."""
        with self.lock:
            if self._full is None:
                self._full = self._make_full()
        return self._full

    def outputs(self) -> list[str]:
        return self.full().outputs()

    def _estimate(self, shapes: dict[str, tuple[tuple[int, ...], int]], keep: set[str], cap: int | None) -> Estimate:
        return self.full()._estimate(shapes, keep, cap)


def elem_type(dtype: np.dtype) -> int | None:
    """``dtype`` as ONNX's element type; None where ONNX has none."""
    found = ELEM_TYPES.get(dtype)
    if found is not None:
        return found
    from onnx import helper

    try:
        return int(helper.np_dtype_to_tensor_dtype(dtype))
    except Exception:
        return None


def _seen_key(feeds: dict, fetch: list[str] | None) -> tuple | None:
    """What decides a run's estimate, exactly: every feed's name, shape and dtype (an array's, or a feed made where
    the session runs: a Spliced, a shared feed), and the fetch list; None where a feed has no shape (a list)."""
    key = []
    for k, v in feeds.items():
        shape, dtype = getattr(v, "shape", None), getattr(v, "dtype", None)
        if shape is None or dtype is None:
            return None
        key.append((k, tuple(shape), dtype))
    return tuple(key), tuple(fetch) if fetch is not None else None


def check_run(plan: EstimateCache, feeds: dict, fetch: list[str] | None, label: str) -> None:
    """The one memory check before a session runs (every run entry goes through a session): refuse, in one
    line, a run whose estimate is over the cap."""
    cap, _ = limits.memory_cap()
    seen = _seen_key(feeds, fetch)
    if seen is not None and plan.passed.get(seen) == cap:
        return
    shapes: dict[str, tuple[tuple[int, ...], int]] = {}
    for k, v in feeds.items():
        a = v if hasattr(v, "shape") and hasattr(v, "dtype") else np.asarray(v)
        try:
            elem = elem_type(np.dtype(a.dtype))
        except Exception:
            continue
        if elem is None:
            continue
        shapes[k] = (tuple(int(d) for d in a.shape), elem)
    est = plan.estimate(shapes, list(fetch or plan.outputs()), within=cap)
    if est.bytes <= cap:  # the common case: no message to word (a generation's 17 cache shapes were ~30 us a run)
        if seen is not None:
            with plan.lock:
                if len(plan.passed) >= _CACHE:
                    plan.passed.pop(next(iter(plan.passed)))
                plan.passed[seen] = cap
        return
    fed = ", ".join(f"{k} {list(s)}" for k, (s, _) in shapes.items())
    cut = _cut_that_fits(plan, shapes, list(fetch or plan.outputs()), cap)
    limits.check_memory(
        est.bytes,
        f"{label}: running it on {fed}" if fed else f"{label}: running it",
        est.detail(),
        hint=cut or "shorten the input if the need grows with it",
        lower=cut or fix("lower_need_if"),
    )


# the share of a suggested cut's input-dependent need (its estimate less the smallest cut's: the weights, mostly) that
# the cap must hold beyond it: the arena that enforces the cap (runtime/arena.py) holds more than the estimate's peak
# (a 20 ms-frame wav2vec2: a cut whose estimate took 0.97 of a 200 MB cap ran out of arena, one at 0.91 ran;
# bench/RESULTS.md, session 22 audio22), and a cut that the arena then refuses helps no one
FIT_SHARE = 0.85


def _cut_that_fits(plan: EstimateCache, shapes: dict, fetch: list[str], cap: int) -> str | None:
    """Where the run names how its input is shortened (:mod:`attnviz.runtime.shorten`: a clip's ``--max-seconds``),
    the flag with the largest value whose run fits ``cap``, found by bisection on exact estimates (the need only
    grows with the input); None where it names none, or even the smallest step does not fit."""
    from attnviz.runtime.shorten import current

    how = current()
    if how is None or how.feed not in shapes or not shapes[how.feed][0]:
        return None
    n = shapes[how.feed][0][-1]  # the feeds of its length along their last axis (its attention mask) cut with it

    def need(k: int) -> int:
        m = how.positions(k * how.step)
        cut = {name: ((*s[:-1], m) if s and s[-1] == n else s, t) for name, (s, t) in shapes.items()}
        return plan.estimate(cut, fetch).bytes  # exact: a bound rounded up to a power of two misjudges short cuts

    top = int(n / how.per / how.step)  # the steps shorter than the input
    while top >= 1 and how.positions(top * how.step) >= n:
        top -= 1
    if top < 1:
        return None
    base = need(1)
    if base > cap:
        return None

    def fits(k: int) -> bool:
        return base + (need(k) - base) / FIT_SHARE <= cap

    lo, hi = 1, top
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return how.said(round(lo * how.step, 6))
