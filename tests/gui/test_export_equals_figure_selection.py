"""File ▸ Export view and ``attnviz figure`` draw the same file for the same non-default selection (figaudit26).

test_screen_equals_figure_defaults checks the selection the window opens on; here the user has moved: another
block, layer and head, special tokens hidden, a log scale, mass kept; an image query on another layer's maximum.
The window's export (the session's selection, no recipe) and the command line's flags for it give the same bytes."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("onnxruntime")

from gui_helpers import demo, open_and_wait
from PySide6.QtCore import QPointF, Qt

from attnviz.cli import main


class _Click:
    """The mouse event Image regions reads: which button, and where in the scene."""

    def __init__(self, at: QPointF):
        self.at = at

    def button(self):
        return Qt.MouseButton.LeftButton

    def scenePos(self) -> QPointF:
        return self.at


@pytest.mark.parametrize(
    "name, view, fmt, select, flags",
    [
        (
            "translation",
            "heatmap",
            "pdf",
            dict(block=("decoder", "self"), mode="head", layer=1, head=2, hide_special=True, log=True, keep=0.9),
            ["--block", "decoder self", "--layer", "1", "--head", "2", "--hide-special", "--log", "--keep", "0.9"],
        ),
        (
            "vit-classification",
            "image",
            "svg",
            # a click on patch (1, 0) of the 8 x 8 grid over 32 x 32 pixels: query 9 ([CLS] first)
            dict(block=("encoder", "self"), mode="max", layer=0, layer_lo=0, layer_hi=0, click=(2.0, 6.0)),
            ["--layer", "0", "--aggregate", "max", "--query", "9"],
        ),
        # the colour top typed into the window's box is figure's --vmax (view28): a head map on the log scale, and
        # image regions on the shared scale (its own box) with the top by hand winning over it
        (
            "translation",
            "heatmap",
            "pdf",
            dict(block=("decoder", "cross"), mode="head", layer=1, head=0, log=True, typed="0.2"),
            ["--block", "decoder cross", "--layer", "1", "--head", "0", "--log", "--vmax", "0.2"],
        ),
        (
            "vit-classification",
            "image",
            "svg",
            dict(block=("encoder", "self"), mode="head", layer=1, head=1, image_scale="shared", typed="0.05"),
            ["--layer", "1", "--head", "1", "--scale", "shared", "--vmax", "0.05"],
        ),
    ],
)
def test_the_windows_export_is_the_figure_of_its_selection(
    qtbot, real_window, tmp_path, name, view, fmt, select, flags
):
    path = demo(name)
    w = real_window
    open_and_wait(qtbot, w, path, timeout=60000)
    stack, kind = select.pop("block")
    click = select.pop("click", None)
    typed = select.pop("typed", None)
    w.session.select(block=w.session.block_index(stack, kind), **select)
    if typed is not None:  # typed into the colour-top box and left, as a user does
        w.controls.vmax.setText(typed)
        w.controls.vmax.editingFinished.emit()
        assert w.session.sel.vmax == float(typed)
    w.select_view(view)
    if click is not None:  # a left click on the image at these pixel coordinates: Image regions holds the query
        regions = w.image_regions
        regions._on_click(_Click(regions.vb.mapViewToScene(QPointF(*click))))
        assert regions.queries[regions.query][1] == 9
    ours = tmp_path / f"window.{fmt}"
    w.export_view(ours)
    qtbot.waitUntil(lambda: w.last_export == ours, timeout=60000)
    theirs = tmp_path / f"figure.{fmt}"
    assert main(["figure", str(path), "--view", view, *flags, "--out", str(theirs)]) == 0
    assert theirs.read_bytes() == ours.read_bytes(), f"{name} {view}: the window's export and figure's differ"
    if typed is not None:  # the export's recipe carries the top, and draws the same bytes again
        import json

        from attnviz.figures.recipe import recipe_path_for

        recipe = recipe_path_for(ours)
        assert json.loads(recipe.read_text())["view"]["vmax"] == float(typed)
        again = tmp_path / f"again.{fmt}"
        assert main(["figure", "--recipe", str(recipe), "--out", str(again)]) == 0
        assert again.read_bytes() == ours.read_bytes()
