"""Corpus-level head analysis: run a model over many inputs and reduce each batch's maps to per-head statistics.

Runtime-level (numpy + onnxruntime + pyarrow; no Qt, no torch).  Ray is imported only by ``--engine ray``.
"""

from attnviz.corpus.run import CorpusConfig, run_corpus

__all__ = ["CorpusConfig", "run_corpus"]
