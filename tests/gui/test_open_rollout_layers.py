"""`attnviz open --aggregate rollout` draws the rollout `attnviz figure --aggregate rollout` draws: from the first
layer up to --layer (else the last).  The window took the mode alone and kept its default range, the last layer
by itself (8424b81: the README's `open MODEL --view image --aggregate rollout --screenshot` said "rollout layer 1"
on the two-layer ViT demo, the figure "rollout layers 0–1")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gui_helpers import open_and_wait

from attnviz.cli import build_parser
from attnviz.figures.select import layer_span

VIT = Path(__file__).resolve().parents[2] / "models" / "vit-classification.onnx"


@pytest.mark.parametrize("extra", [[], ["--layer", "0"], ["--layer", "1"]])
def test_open_rollout_spans_the_layers_figure_spans(qtbot, real_window, extra):
    from attnviz.gui.command import focus_from_args

    args = build_parser().parse_args(["open", str(VIT), "--view", "image", "--aggregate", "rollout", *extra])
    open_and_wait(qtbot, real_window, VIT)
    session = real_window.session
    block = session.result.blocks()[session.sel.block]
    last = block.n_layers - 1
    assert last >= 1  # two layers at least: a range, not one layer either way
    session.select(**focus_from_args(args))
    sel = session.sel
    layer = args.layer if args.layer is not None else last
    assert (sel.mode, sel.layer_lo, sel.layer_hi) == ("rollout", *layer_span(layer, "rollout", None))
    shown = session.current_map().matrix  # what the Head map draws, against Abnar & Zuidema's rollout by hand
    want = np.eye(shown.shape[0])
    for i in range(layer + 1):  # heads averaged, the residual's half added, rows renormalised, first layer first
        a = 0.5 * np.eye(shown.shape[0]) + 0.5 * np.asarray(block.layer(i), np.float64).mean(0)
        want = (a / a.sum(-1, keepdims=True)) @ want
    np.testing.assert_allclose(shown, want, atol=1e-5)
