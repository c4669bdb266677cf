"""Qt-free, torch-free data model: attention maps, token/patch axes, reductions, statistics, I/O.

The public names load on first use (PEP 562): the command line's own modules (``core.limits``, ``core.writes``) are
plain Python, and a command that spawns processes (``attnviz corpus``) starts them before it imports numpy (~0.05 s
CPU on the driver's path to its workers)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnviz.core.attention import (
        AttentionResult,
        Block,
        DenseMap,
        MapSource,
        PatchGrid,
        SiteInfo,
        TokenAxis,
    )

__all__ = ["AttentionResult", "Block", "DenseMap", "MapSource", "PatchGrid", "SiteInfo", "TokenAxis"]


def __getattr__(name: str) -> object:
    if name not in __all__:
        raise AttributeError(f"module 'attnviz.core' has no attribute {name!r}")
    from attnviz.core import attention

    value = getattr(attention, name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value
