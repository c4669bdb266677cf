"""`attnviz open`'s focus flags read as `attnviz figure`'s.  ``--aggregate rollout`` draws the rollout `figure
--aggregate rollout` draws: from the first layer up to --layer (else the last); the window took the mode alone and
kept its default range, the last layer by itself (8424b81: the README's `open MODEL --view image --aggregate rollout
--screenshot` said "rollout layer 1" on the two-layer ViT demo, the figure "rollout layers 0–1").  ``--block``
takes a block's name as figure's does (the README's `--block "encoder self stage 2"`; open took an index only)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gui_helpers import open_and_wait

from attnviz.cli import build_parser
from attnviz.figures.select import layer_span

VIT = Path(__file__).resolve().parents[2] / "models" / "vit-classification.onnx"
DEMO = VIT.with_name("translation.onnx")


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
    np.testing.assert_allclose(shown, _rollout_by_hand(block, range(layer + 1)), atol=1e-5)


def _rollout_by_hand(block, layers) -> np.ndarray:
    """Abnar & Zuidema's rollout: heads averaged, the residual's half added, rows renormalised, first layer first."""
    n = np.asarray(block.layer(0)).shape[-1]
    want = np.eye(n)
    for i in layers:
        a = 0.5 * np.eye(n) + 0.5 * np.asarray(block.layer(i), np.float64).mean(0)
        want = (a / a.sum(-1, keepdims=True)) @ want
    return want


def test_rollout_chosen_in_the_show_box_starts_at_layer_0(qtbot, real_window):
    """The window opens on the mean over the last layer's heads; choosing "attention rollout" in the show box kept
    that one layer as the range (a one-layer rollout). It rolls out from layer 0, as the command line does; a range
    the user sets under rollout is kept."""
    open_and_wait(qtbot, real_window, VIT)
    session, controls = real_window.session, real_window.controls
    block = session.result.blocks()[session.sel.block]
    last = block.n_layers - 1
    assert last >= 1 and session.sel.mode == "mean" and session.sel.layer_lo == last  # the default: one layer
    controls.mode.setCurrentIndex(controls.mode.findData("rollout"))
    assert (session.sel.mode, session.sel.layer_lo) == ("rollout", 0)
    assert controls.layer_lo.value() == 0 and controls.layer_hi.value() == last
    np.testing.assert_allclose(session.current_map().matrix, _rollout_by_hand(block, range(last + 1)), atol=1e-5)
    controls.layer_lo.setValue(1)  # a range set under rollout is the user's: kept
    assert (session.sel.mode, session.sel.layer_lo) == ("rollout", 1)
    np.testing.assert_allclose(session.current_map().matrix, _rollout_by_hand(block, [1]), atol=1e-5)


@pytest.mark.parametrize("given", ["decoder cross", "2", "cross"])
def test_open_block_takes_a_name_or_an_index_as_figure_does(qtbot, real_window, given):
    from attnviz.figures.select import resolve_block
    from attnviz.gui.command import check_focus, focus_from_args

    args = build_parser().parse_args(["open", str(DEMO), "--block", given, "--layer", "1", "--head", "3"])
    open_and_wait(qtbot, real_window, DEMO)
    session = real_window.session
    focus = focus_from_args(args)
    index = check_focus(session.result, focus, session.sel)
    assert index == resolve_block(session.result, given)[0] == 2  # the demo's blocks: encoder self, decoder self, cross
    session.select(**(focus | {"block": index}))
    assert (session.sel.block, session.sel.layer, session.sel.head, session.sel.mode) == (2, 1, 3, "head")
    assert session.result.blocks()[session.sel.block].kind == "cross"


def test_open_block_that_is_not_there_is_named_with_the_blocks(qtbot, real_window):
    from attnviz import AttnvizError
    from attnviz.gui.command import check_focus, focus_from_args

    open_and_wait(qtbot, real_window, DEMO)
    args = build_parser().parse_args(["open", str(DEMO), "--block", "decoder nonsense"])
    with pytest.raises(AttnvizError) as e:
        check_focus(real_window.session.result, focus_from_args(args), real_window.session.sel)
    assert "no block 'decoder nonsense'" in str(e.value) and "2 (decoder cross)" in str(e.value)


def test_open_scale_and_log_set_both_boxes_as_figure_does(qtbot, real_window):
    """`open --scale shared --log` (scale26 left the window's colour scale to the boxes alone): the token maps' and
    Image regions' scales both, as `figure --scale` sets either view's; the image's colour bar then spans the
    shared top, [CLS]'s largest weight over the patches in any head of the block, by hand."""
    from attnviz.gui.command import focus_from_args

    args = build_parser().parse_args(["open", str(VIT), "--view", "image", "--scale", "shared", "--log"])
    open_and_wait(qtbot, real_window, VIT)
    real_window.select_view("image")
    real_window.session.select(**focus_from_args(args))
    sel = real_window.session.sel
    assert (sel.scale, sel.image_scale, sel.log) == ("shared", "shared", True)
    assert real_window.controls.scale.currentData() == "shared" and real_window.controls.log.isChecked()
    v = real_window.image_regions
    bi, grid = v.source()[0], v.source()[1]
    blk = real_window.session.blocks[bi]
    top = max(
        float(blk.head(layer, h)[0, grid.offset : grid.end].max())
        for layer in range(blk.n_layers)
        for h in range(blk.heads_in(layer))
    )
    assert float(v.colorbar.levels()[1]) == pytest.approx(np.log10(top), rel=1e-5)


def _open_focus(window, argv):
    """What `attnviz open DEMO ARGV` selects once its first result is shown (command.run's apply_focus)."""
    from attnviz.gui.command import check_focus, figure_focus, focus_from_args

    args = build_parser().parse_args(["open", str(DEMO), *argv])
    session = window.session
    asked = figure_focus(session.result, focus_from_args(args), args.view, session.sel)
    block = check_focus(session.result, asked, session.sel)
    session.select(**(asked | {"block": block} if "block" in asked else asked))
    return session.sel


def _figure_selection(result, argv):
    """What `attnviz figure DEMO ARGV` draws: its flags through declared_defaults and resolve."""
    from attnviz.figures import FigureSpec
    from attnviz.figures.select import declared_defaults, resolve

    it = iter(argv)
    flags = dict(zip(it, it))
    spec = FigureSpec(
        view="heatmap",
        head=int(flags["--head"]) if "--head" in flags else None,
        layer=int(flags["--layer"]) if "--layer" in flags else None,
        agg=flags.get("--aggregate"),
    )
    return resolve(result, declared_defaults(result, spec)[0])


def _shown(sel):
    if sel.mode == "head":
        return sel.block, sel.mode, sel.layer, sel.head
    return sel.block, sel.mode, sel.layer_lo, sel.layer_hi


@pytest.mark.parametrize(
    "argv", [["--head", "1"], ["--head", "3", "--layer", "0"], ["--layer", "0"], ["--aggregate", "max"]]
)
def test_open_without_block_shows_what_figure_draws(qtbot, real_window, argv):
    """cmp27: `open --head H` (a layer, an aggregate) without --block shows the block, heads and layers `figure`
    draws for the same flags: the translation demo's declared alignment head's block (decoder cross-attention), and
    for --layer alone the mean over that layer's heads (open showed the declared head of that layer), for an
    aggregate alone the last layer's heads (open aggregated every layer's)."""
    open_and_wait(qtbot, real_window, DEMO)
    result = real_window.session.result
    drawn = _figure_selection(result, argv)
    assert result.blocks()[drawn.block].kind == "cross"
    assert _shown(_open_focus(real_window, argv)) == _shown(drawn)


def test_open_and_figure_ask_one_rule_for_the_block(qtbot, real_window, monkeypatch):
    """The block is decided in one place (figures.select.unnamed_block) for both commands: moved there, both move."""
    from attnviz.figures import select

    open_and_wait(qtbot, real_window, DEMO)
    result = real_window.session.result
    monkeypatch.setattr(select, "unnamed_block", lambda result, view_key: 1)  # the demo's decoder self-attention
    assert _figure_selection(result, ["--head", "1"]).block == 1
    assert _open_focus(real_window, ["--head", "1"]).block == 1
