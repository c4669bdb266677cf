"""CLI commands of the training backend: ``attnviz train`` and ``attnviz eval``."""
