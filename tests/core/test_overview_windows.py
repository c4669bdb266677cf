"""The overview's row labels say which layers of a block attend within windows (SiteInfo.window, Qwen2.5-VL's
vision blocks) and which over everything; a block whose layers all see everything keeps its plain ``L0`` labels."""

from __future__ import annotations

import numpy as np

from attnviz.core import AttentionResult, DenseMap, SiteInfo
from attnviz.core import view as vm


def _result(windows: list[str | None]) -> AttentionResult:
    sites = [SiteInfo("encoder", "self", i, 2, f"n{i}", "softmax", window=w) for i, w in enumerate(windows)]
    return AttentionResult([DenseMap(np.full((1, 2, 4, 4), 0.25, np.float32)) for _ in sites], sites)


def test_windowed_and_full_layers_are_labelled():
    blk = _result(["32-px windows", None, "32-px windows"]).blocks()[0]
    assert vm.layer_windows(blk) == ["32-px windows", None, "32-px windows"]
    assert vm.layer_labels(blk) == ["L0 win", "L1 full", "L2 win"]
    assert vm.windows_note(blk) == "win: within 32-px windows"


def test_a_block_without_windows_keeps_its_labels():
    blk = _result([None, None]).blocks()[0]
    assert vm.layer_labels(blk) == ["L0", "L1"] and vm.windows_note(blk) is None
