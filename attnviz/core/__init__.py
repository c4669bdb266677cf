"""Qt-free, torch-free data model: attention maps, token/patch axes, reductions, statistics, I/O."""

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
