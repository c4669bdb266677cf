"""A vision->text optimum export folder opened in the real window: the Image regions view shows a caption
word's cross-attention over the image patches (grid read from the encoder graph)."""

from __future__ import annotations

import numpy as np
import pytest
from gui_helpers import open_and_wait

pytest.importorskip("onnxruntime")
PIL = pytest.importorskip("PIL.Image")
pytestmark = pytest.mark.slow


def test_vision_to_text_folder_shows_a_caption_word_over_the_patches(qtbot, real_window, optimum_export, tmp_path):
    root = optimum_export("vit-gpt2")
    rgb = np.zeros((64, 64, 3), np.uint8)
    rgb[8:28, 8:28] = (230, 60, 60)
    rgb[36:60, 36:60] = (60, 200, 90)
    img = tmp_path / "scene.png"
    PIL.fromarray(rgb).save(img)
    w = real_window
    open_and_wait(qtbot, w, root / "onnx", image=str(img), generate=4)
    r = w.session.result
    assert w.session.model.kind == "vision-decoder" and r.info["generation"] == "kv-cache"
    assert [b.name for b in w.session.blocks] == [
        "encoder self-attention",
        "decoder self-attention",
        "decoder cross-attention",
    ]
    w.select_view("image")
    w.session.select(block=2, layer=1, head=3, mode="head")
    v = w.image_regions
    v.draw()
    assert [q for q, _ in v.queries] == r.generated  # one query per caption word
    row = v.queries[v.query][1]
    cross_l1 = [i for i, s in enumerate(r.sites) if (s.kind, s.layer) == ("cross", 1)][0]
    # the overlay's patch weights are that word's row of the map over the 4x4 patches (CLS excluded)
    np.testing.assert_allclose(v.patch_map, r.maps[cross_l1].array()[0, 3, row, 1:].reshape(4, 4), rtol=1e-5)
    assert "grid 4×4 (+1 non-patch)" in v.info.text()


def test_swin_image_regions_show_the_selected_stage_as_the_export_draws_it(
    qtbot, real_window, optimum_export, tmp_path
):
    """A 3-stage Swin folder: each stage is a block with its own grid (16x16, 8x8, 4x4 patches).  The view showed
    stage 1 whatever block was selected while File > Export view drew the selected one."""
    from screen_figure import check_image, figure

    root = optimum_export("swin-stages")
    rgb = np.zeros((64, 64, 3), np.uint8)
    rgb[8:40, 24:56] = (230, 60, 60)
    img = tmp_path / "scene.png"
    PIL.fromarray(rgb).save(img)
    w = real_window
    open_and_wait(qtbot, w, root / "onnx", image=str(img))
    names = [b.name for b in w.session.blocks]
    assert [n.rsplit(" ", 1)[-1] for n in names] == ["1", "2", "3"] and all("stage" in n for n in names)
    w.select_view("image")
    v = w.image_regions
    for block, side in ((0, 16), (1, 8), (2, 4)):
        w.session.select(block=block, layer=0, head=0, mode="head")
        v.draw()
        assert v.patch_map.shape == (side, side), (block, v.patch_map.shape)
        assert f"grid {side}×{side}" in v.info.text()
        check_image(w, figure(w, v))  # the screen and the exported figure: the same stage, the same heat
    # stage 1's first block (16x16 patches, unshifted windows): a clicked patch looks only inside its own window
    import json

    from PySide6.QtCore import QPointF, Qt

    size = json.loads((root / "onnx" / "config.json").read_text())["window_size"]
    w.session.select(block=0, layer=0, head=0, mode="head")
    v.draw()
    h, wd = v._image_size
    scene = v.vb.mapViewToScene(QPointF(5.5 * wd / 16, 5.5 * h / 16))  # patch (5, 5)
    qtbot.mouseClick(v.glw.viewport(), Qt.MouseButton.LeftButton, pos=v.glw.mapFromScene(scene))
    assert v.queries[v.query][0] == "patch (5, 5)"
    nonzero = np.argwhere(v.patch_map > 1e-6)
    lo = (5 // size) * size
    assert len(nonzero) == size * size and nonzero.min() >= lo and nonzero.max() < lo + size
