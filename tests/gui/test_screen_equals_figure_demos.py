"""Screen = figure on the shipped demo models run through the real engine (the GUI's own analyze path):
encoder (sequence classification, also as a padded batch of 2), decoder (forecasting), encoder-decoder
(translation, generating), vision (ViT) and captioning (generating). Every view the result has x a grid of
settings x every block: the numbers, labels, ticks, colours and overlay the GUI draws equal the figure's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("onnxruntime")

from screen_figure import SETTINGS, check_grid, views_for

MODELS = Path(__file__).resolve().parents[2] / "models"
DEMOS = {
    "encoder": "sequence-classification",
    "decoder": "forecasting",
    "encoder-decoder": "translation",
    "vision": "vit-classification",
    "captioning": "captioning",
}
# every view each family has (what the tabs offer; the others explain why they are empty)
FAMILY_VIEWS = {
    "encoder": {"overview", "head", "links"},
    "decoder": {"overview", "head", "links"},
    "encoder-decoder": {"overview", "head", "links", "alignment"},
    "vision": {"overview", "head", "links", "image"},
    "captioning": {"overview", "head", "links", "alignment", "image"},
}
# the demos have 2 layers x 4 heads; the last setting asks for the last head of the last layer
GRID = SETTINGS + [("last head, layer 2 only", dict(mode="head", layer=1, head=3, layer_lo=1, layer_hi=1))]


@pytest.fixture(scope="module")
def demos():
    """Each demo opened and run once with its own sample input, through the window's worker function."""
    from attnviz.app.jobs import analyze
    from attnviz.app.rules import first_input
    from attnviz.runtime import open_model
    from attnviz.runtime.request import AnalyzeRequest

    out = {}
    for family, name in DEMOS.items():
        path = MODELS / f"{name}.onnx"
        if not path.exists():
            pytest.skip(f"demo model {path.name} is not in this checkout")
        model = open_model(path)
        out[family] = (model, analyze(model, AnalyzeRequest(**first_input(model, {}))))
    # a padded batch of 2 on the encoder: the second row is shorter, its padded keys get no weight
    model = out["encoder"][0]
    vocab = model.meta["vocab"]
    ids = np.array(
        [[vocab.index(c) for c in "7 2 9 5 1 8 6 3".split()], [vocab.index(c) for c in "4 4 9".split()] + [0] * 5]
    )
    out["encoder batch"] = (
        model,
        model.analyze(feeds={"input_ids": ids, "attention_mask": (ids != 0).astype(ids.dtype)}),
    )
    return out


@pytest.mark.parametrize("family", list(DEMOS))
def test_demo_screen_equals_figure(qtbot, window, demos, family):
    model, result = demos[family]
    w = window
    w.session.set_model(model)
    checked = check_grid(w, result, GRID)
    assert set(views_for(w)) == FAMILY_VIEWS[family]
    if family in ("encoder-decoder", "captioning"):
        assert len(result.generated) >= 2  # the step settings really ran on generated words
    assert checked >= len(FAMILY_VIEWS[family]) * len(w.session.blocks) * 5


def test_demo_batch_rows_screen_equals_figure(qtbot, window, demos):
    """Each row of a real padded batch: the row's own tokens and maps, on screen and in the figure."""
    model, result = demos["encoder batch"]
    w = window
    w.session.set_model(model)
    assert result.batch_size == 2
    w._show_result(result)
    vocab = model.meta["vocab"]
    # row 1 is right-padded to 8 (its mask 1 1 1 0 0 0 0 0): the views show its own three tokens, no pads
    for row, words in ((0, "7 2 9 5 1 8 6 3"), (1, "4 4 9")):
        w.session.select(batch=row)
        checked = check_grid_row(w, result, row)
        assert checked > 0
        w.select_view("head")
        w.session.select(mode="head", layer=1, head=2, hide_special=False, keep=1.0, log=False)
        hm = w.head_map.heatmap
        assert hm.y_axis.labels == words.split() and all(t in vocab for t in hm.x_axis.labels)
        n = len(words.split())
        np.testing.assert_array_equal(hm.mv.matrix, result.maps[1].array()[row, 2, :n, :n])
    assert np.abs(result.maps[1].array()[1, :, :, 3:]).max() < 1e-6  # the padded keys of row 2 get no weight


def check_grid_row(w, result, row) -> int:
    """The settings grid with the batch row held at ``row`` (check_grid re-shows the result, which keeps it)."""
    return check_grid(w, result, [(name, {**changes, "batch": row}) for name, changes in GRID])
