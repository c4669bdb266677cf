"""Corpus-level head analysis: run a model over many inputs and reduce each batch's maps to per-head statistics.

Runtime-level (numpy + onnxruntime + pyarrow; no Qt, no torch).  Ray is imported only by ``--engine ray``.

``CorpusConfig`` and ``run_corpus`` are loaded on first use: a worker process unpickles its task from
``attnviz.corpus.engines`` and needs the reduction, not the driver (reading, planning, output, Ray streams).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnviz.corpus.run import CorpusConfig, run_corpus

__all__ = ["CorpusConfig", "run_corpus"]


def __getattr__(name: str):
    if name in __all__:
        from attnviz.corpus import run

        return getattr(run, name)
    raise AttributeError(f"module 'attnviz.corpus' has no attribute {name!r}")
