"""The window's colour-top box (view28): the top of the colour scale set by hand, as `figure --vmax` sets it.  It is
the selection's (``Selection.vmax``), so every view that draws a colour scale reads it (the head map, the overview,
image regions); empty is the scale's own top; a bad value (0, negative, text, NaN) is one message and the box marked.
`open --vmax` sets it as figure's flag does; a session restores it.  That the figure of each view draws the same
scale is tests/gui/test_screen_equals_figure.py's grid (its "vmax" settings)."""

from __future__ import annotations

import math

import pytest
from gui_helpers import open_and_wait

from attnviz.cli import build_parser, main


def _type(controls, text: str) -> None:
    """Type ``text`` into the colour-top box and leave it, as a user does (Return or Tab)."""
    controls.vmax.setText(text)
    controls.vmax.editingFinished.emit()


def test_the_colour_top_box_sets_every_views_scale(qtbot, window, files):
    w = window
    open_and_wait(qtbot, w, files["vit.onnx"], image=str(files["image"]))
    c, s = w.controls, w.session
    assert c.vmax.text() == "" and s.sel.vmax is None and c.vmax.placeholderText() == "auto"
    s.select(scale="fixed", image_scale="map", log=False, mode="head", layer=0, head=0)
    _type(c, "0.020")
    assert s.sel.vmax == 0.02 and c.vmax.text() == "0.02"  # read back as the selection holds it
    w.select_view("head")
    hm = w.head_map.heatmap
    assert hm.colorbar.levels() == pytest.approx((0.0, 0.02)) and "top 0.02 set by hand" in hm.colorbar.axis.labelText
    w.select_view("overview")
    assert w.overview.levels == pytest.approx((0.0, 0.02))
    assert "top 0.02 set by hand" in w.overview.colorbar.axis.labelText
    w.select_view("image")
    ir = w.image_regions
    assert ir.colorbar.levels() == pytest.approx((0.0, 0.02)) and "top 0.02 set by hand" in ir.colorbar.axis.labelText
    s.select(log=True)  # the log scale keeps the top: three decades below it
    lo, hi = ir.colorbar.levels()
    assert (lo, hi) == pytest.approx((math.log10(0.02e-3), math.log10(0.02)))
    _type(c, "")  # empty: the scale's own top again (image regions: stretched to the map)
    assert s.sel.vmax is None and "set by hand" not in ir.colorbar.axis.labelText
    w.select_view("head")
    assert w.head_map.heatmap.colorbar.levels()[1] == pytest.approx(0.0)  # fixed 0–1 on the log scale: log10(1)


@pytest.mark.parametrize("bad", ["0", "-1", "abc", "nan", "inf", "1e"])
def test_a_bad_top_is_one_message_and_the_box_marked(qtbot, window, files, bad):
    w = window
    open_and_wait(qtbot, w, files["text.onnx"])
    _type(w.controls, "0.5")
    said: list[str] = []
    w.error_shown.connect(said.append)
    _type(w.controls, bad)
    # named as the window names the box (ux28: it said "vmax '0'", a name the window shows nowhere)
    assert len(said) == 1 and said[0].startswith(f"colour top {bad!r}: ") and "> 0" in said[0] and "\n" not in said[0]
    assert w.marked_widget is w.controls.vmax
    assert w.session.sel.vmax == 0.5 and w.controls.vmax.text() == "0.5"  # the top in force stays, and shows


def test_the_colour_scale_box_says_a_top_set_by_hand_overrides_it(qtbot, window, files):
    """ux28: the colour-scale box showed "fixed 0–1" while a top set by hand was the colour bar's top; it greys and
    says so, and shows the scale again once the top is cleared."""
    w = window
    open_and_wait(qtbot, w, files["text.onnx"])
    c, s = w.controls, w.session
    w.select_view("head")
    s.select(scale="shared")
    assert c.scale.isEnabled() and c.scale.currentData() == "shared"
    _type(c, "0.3")
    assert not c.scale.isEnabled() and c.scale.currentIndex() == -1
    assert c.scale.currentText() == "" and c.scale.placeholderText() == "top set by hand (0.3)"
    assert "0.3" in c.scale.toolTip() and "clear the colour-top box" in c.scale.toolTip()
    assert s.sel.scale == "shared"  # the scale chosen is kept, not overwritten by the box's blank
    assert w.head_map.heatmap.colorbar.levels() == pytest.approx((0.0, 0.3))  # what the box says is in force
    _type(c, "")
    assert c.scale.isEnabled() and c.scale.currentData() == "shared" and "set by hand" not in c.scale.toolTip()
    _type(c, "0.3")
    w.select_view("stats")  # a view with no colour scale: its own words, whatever the top
    assert not c.scale.isEnabled() and c.scale.toolTip() == w.stats.scale_note
    w.select_view("head")
    assert c.scale.placeholderText() == "top set by hand (0.3)" and not c.scale.isEnabled()


def test_the_box_greys_where_the_view_has_no_colour_scale(qtbot, window, files):
    w = window
    open_and_wait(qtbot, w, files["text.onnx"])
    w.select_view("head")
    assert w.controls.vmax.isEnabled()
    w.select_view("stats")
    assert not w.controls.vmax.isEnabled()


def test_open_vmax_is_figures(qtbot, window, files, capsys, tmp_path):
    from attnviz.gui.command import focus_from_args

    model = files["text.onnx"]
    args = build_parser().parse_args(["open", str(model), "--vmax", "0.25"])
    assert focus_from_args(args)["vmax"] == 0.25
    open_and_wait(qtbot, window, model)
    window.session.select(**focus_from_args(args))
    assert window.controls.vmax.text() == "0.25" and window.session.current_map().vmax == 0.25
    for bad in ("0", "-2", "nan"):
        capsys.readouterr()
        assert main(["open", str(model), "--vmax", bad, "--screenshot", str(tmp_path / "s.png")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"--vmax {bad}: " in err[0] and "> 0" in err[0], err  # the flag as typed (ux28)


def test_a_session_restores_its_top_and_drops_a_bad_one():
    from attnviz.gui.restore import SELECTION_KINDS, SELECTION_VALUES, valid

    assert valid({"vmax": 0.3}, SELECTION_KINDS, SELECTION_VALUES) == {"vmax": 0.3}
    assert valid({"vmax": None}, SELECTION_KINDS, SELECTION_VALUES) == {"vmax": None}
    for bad in (0, -1.0, float("nan"), float("inf"), "0.3", True, 1e-9):  # (1e-9: below VMAX_MIN, as typed too)
        assert valid({"vmax": bad}, SELECTION_KINDS, SELECTION_VALUES) == {}
