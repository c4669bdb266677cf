"""Image regions on a result with no picture (a run on raw pixel feeds): the heat lies on a flat grey square, and
the view says so in its line rather than letting the square pass for the image."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from gui_helpers import open_and_wait

pytest.importorskip("onnxruntime")

MODELS = Path(__file__).resolve().parents[2] / "models"


def test_a_result_without_a_picture_says_so_and_one_with_a_picture_does_not(qtbot, real_window):
    from attnviz.gui.views.image_regions import NO_PICTURE

    w = real_window
    open_and_wait(qtbot, w, MODELS / "vit-classification.onnx")
    w.select_view("image")
    v = w.image_regions
    v.draw()
    assert w.session.result.image is not None
    assert NO_PICTURE not in v.info.text()
    with_picture = v.patch_map.copy()
    w._show_result(dataclasses.replace(w.session.result, image=None))
    w.select_view("image")
    v.draw()
    assert v.info.text().endswith(NO_PICTURE)
    under = v.image_item.image
    assert under is not None and np.ptp(under) == 0  # the flat square the note is about
    np.testing.assert_array_equal(v.patch_map, with_picture)  # the heat itself is the same maps
