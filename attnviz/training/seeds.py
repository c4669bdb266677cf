"""Fixed data seeds per task and split (a module of its own: the task registry and the speech trainer both use it)."""

from __future__ import annotations


def split_seed(task: str, split: str) -> int:
    """Fixed data seed per (task, split); train and test never share one."""
    base = sum(ord(c) * (i + 1) for i, c in enumerate(task)) % 100_000
    return base * 10 + {"train": 1, "test": 2, "sample": 3}[split]
