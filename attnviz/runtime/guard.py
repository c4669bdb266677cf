"""A session's memory check before each run, and the in-process session that passes it
(``ATTNVIZ_INPROCESS=1``: corpus workers, Ray actors) as the crash-isolation child's sessions do
(:mod:`attnviz.runtime.host`)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from attnviz.runtime.chain import run_bound

if TYPE_CHECKING:
    from attnviz.runtime.memory_kept import EstimateCache, PlanHead
    from attnviz.runtime.optcache import GraphKey
    from attnviz.runtime.pinned_outputs import PinnedOutputs


class MemoryCheck:
    """A session's memory check before each run (:func:`attnviz.runtime.memory_kept.check_run`); the model's
    structure is read on the first run, not when the session opens."""

    def __init__(self, model: bytes | str, label: str, keep: GraphKey | None = None, head: PlanHead | None = None):
        """``keep``: the model's :func:`attnviz.runtime.optcache.graph_key`: its estimates are kept on disk.
        ``head``: what a :class:`~attnviz.runtime.memory.MemoryPlan` of ``model`` (bytes) said of it before any
        estimate, kept by an earlier command: the plan is then made without parsing the graph (and without
        importing onnx) until an estimate is not on disk (:class:`~attnviz.runtime.memory_kept.KeptPlan`)."""
        self._model: bytes | str | None = model
        self._plan: EstimateCache | None = None
        self.label = label
        self.keep = keep
        self.head = head
        self._planning = threading.Lock()  # runs from several threads (a corpus worker's): the plan is made once

    def check(self, feeds: dict, names: list[str] | None) -> None:
        from attnviz.runtime import memory_kept

        if self._plan is None:
            with self._planning:
                if self._plan is None:
                    assert self._model is not None
                    self._plan = self._made(self._model)
                    self._model = None  # the plan keeps the structure; the bytes stay with the session's owner
        memory_kept.check_run(self._plan, feeds, names, self.label)

    def _made(self, model: bytes | str) -> EstimateCache:
        def full() -> EstimateCache:
            from attnviz.runtime import memory  # onnx's shape inference, imported where sessions run

            return memory.MemoryPlan(model, keep=self.keep)

        if self.head is not None:
            from attnviz.runtime.memory_kept import KeptPlan

            return KeptPlan(self.head, self.keep, full)
        return full()


class GuardedSession:
    """An in-process ``onnxruntime.InferenceSession`` (``ATTNVIZ_INPROCESS=1``: corpus workers, Ray actors)
    whose runs pass the same memory check as the child's; anything else goes to the session itself."""

    def __init__(self, sess, memory: MemoryCheck, keep: tuple[str, ...] = (), keep_mode: str = "off"):
        self._sess = sess
        self.memory = memory
        self.unguarded = sess  # for a loop that checked its first step's shapes itself (model.run_loop)
        # the outputs (an on-demand session's Q and Kᵀ) its runs leave on its device, where (runtime/kept.py)
        self.keep: tuple[frozenset[str], str, int] | None = None
        if keep:
            from attnviz.runtime.kept import device_id, keep_device

            device = keep_device(sess.get_providers()[0], keep_mode)
            if device:
                self.keep = (frozenset(keep), device, device_id(sess, device))
        # on CUDA: its large outputs go into page-locked buffers (runtime/pinned_outputs.py); never looked at on CPU
        self.outputs: PinnedOutputs | None = None
        if sess.get_providers()[:1] == ["CUDAExecutionProvider"]:
            from attnviz.runtime.pinned_outputs import PinnedOutputs, shared_buffers

            self.outputs = PinnedOutputs(shared_buffers())

    def __getattr__(self, name: str):
        return getattr(self._sess, name)

    def run(self, names, feeds, run_options=None) -> list:
        self.memory.check(feeds, None if names is None else list(names))
        return self._sess.run(names, feeds, run_options)

    def pinned(self) -> str:
        """Whether this session's large outputs go into page-locked buffers: ``"yes"`` or ``"no (why)"``."""
        return self.outputs.buffers.pinner.state if self.outputs is not None else "no (not a CUDA session)"

    def run_bound(self, names, feeds) -> list:
        """Like :meth:`~attnviz.runtime.host.RemoteSession.run_bound`: outputs bound to onnxruntime-allocated host buffers."""
        self.memory.check(feeds, list(names))
        if self.keep is not None:  # Q and Kᵀ stay where onnxruntime wrote them; the rest is small (outputs, masks)
            from attnviz.runtime.kept import bind_run

            return bind_run(self._sess, list(names), feeds, *self.keep)
        if self.outputs is not None:
            return self.outputs.run(self._sess, list(names), feeds)
        return run_bound(self._sess, list(names), feeds)  # onnxruntime's session: bound as any in-process run is

    def run_small(self, names, feeds) -> list:
        """:meth:`run_bound` for outputs of a few hundred kB at most (a corpus batch's statistics): where nothing is
        bound (no output kept on the device, no page-locked buffers: a CPU session) onnxruntime's own run, which
        costs less host time than a binding for such outputs (a MiniLM batch's sums and picks, bench/RESULTS.md
        session 24: ~20 µs a run, most of it under the GIL).  On CUDA they still go into page-locked buffers (a
        copy the device makes itself, where a pageable one is staged through the driver on the host), until a
        device measures that the plain run costs less there too (bench/gpu/corpus_gil.py's plain-run rows)."""
        if self.keep is None and self.outputs is None:
            return self.run(names, feeds)
        return self.run_bound(names, feeds)

    def helper_memory(self):
        """How this session holds memory (:func:`attnviz.runtime.kept.helper_memory`)."""
        from attnviz.runtime.kept import helper_memory

        return helper_memory(self._sess)

    def run_kept(self, names, feeds, values, hints) -> list:
        """Like :meth:`~attnviz.runtime.host.RemoteSession.run_kept`: ``values`` are
        :class:`~attnviz.runtime.kept.Kept` OrtValues of this process, bound where they are (``hints`` unused: the
        outputs land where onnxruntime puts them, as a run's here do)."""
        from attnviz.runtime.kept import head_run

        return head_run(self._sess, list(names), feeds, {k: v.value for k, v in values.items()}, {})
