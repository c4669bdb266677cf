"""A session of an edited copy of a model's graph (:meth:`attnviz.runtime.model.AttentionModel.extra_session`).

Here, not in model.py, so that a corpus worker whose statistics session is read back from the cache
(runtime/light_model.py) runs it without importing onnx and the model's code."""

from __future__ import annotations

import numpy as np

from attnviz.runtime.chain import run_bound


class ExtraSession:
    """A session of an edited copy of a model's graph.  ``graph_sha256``: the sha256 of the bytes it was made
    from; ``kept``: whether onnxruntime's optimised graph of it is kept on disk (runtime/optcache.py)."""

    def __init__(self, sess, graph_sha256: str = "", kept: bool = False):
        self._sess = sess
        self.graph_sha256 = graph_sha256
        self.kept = kept

    @property
    def provider(self) -> str:
        """The execution provider it runs on."""
        return self._sess.get_providers()[0]

    def output_names(self) -> list[str]:
        """The names of the graph's outputs."""
        return [o.name for o in self._sess.get_outputs()]

    def run(self, fetch: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The ``fetch`` outputs for ``feeds`` (onnxruntime's errors pass through unchanged)."""
        return run_bound(self._sess, fetch, feeds)

    def run_small(self, fetch: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """:meth:`run` for outputs of a few hundred kB at most (a corpus batch's statistics): an in-process session's
        cheapest way to them (:meth:`attnviz.runtime.guard.GuardedSession.run_small`); the crash-isolation child's
        as :meth:`run` (its replies are pickled or in its slots already)."""
        small = getattr(self._sess, "run_small", None)
        return small(fetch, feeds) if small is not None else run_bound(self._sess, fetch, feeds)
