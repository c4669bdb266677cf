"""Image regions of an Idefics3 / SmolVLM vision encoder opened alone (``onnx/vision_encoder.onnx``, no decoder): in
the real window on the 64 px sample (the processor resizes it to 96: 2 x 2 tiles of 48) the tower's attention is
drawn over every tile where the processor's split puts it and over the global image beside them, each cell the
row's weight on the key its label names (placed by hand), a clicked patch named as the whole model's tower view
names it; the command line's extract runs it and refuses what it cannot do in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gui_helpers import open_and_wait
from screen_figure import check_image, figure

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("matplotlib")

SAMPLE = Path(__file__).resolve().parents[2] / "resources" / "samples" / "captioning.png"


def test_the_encoder_alone_draws_every_tile_beside_the_global_image(qtbot, real_window, idefics3_repo):
    import vlm_build as vb
    from PySide6.QtCore import QPointF, Qt

    w = real_window
    open_and_wait(qtbot, w, idefics3_repo / "onnx" / "vision_encoder.onnx", image=str(SAMPLE))
    r, s, v = w.session.result, w.session, w.image_regions
    w.select_view("image")
    bi, grid, _ = v.source()
    assert s.blocks[bi].stack == "encoder" and (grid.rows, grid.cols) == (12, 12) and v._two
    # its tower block named as the whole model names it; the flag that says so is not a run fact of its own
    run = w.sidebar.values("Run")
    assert run["maps"] == "2 sites, vision self-attention 2×4" and "vision_tower" not in run
    labels = list(s.blocks[bi].key_axis.labels)
    s.select(mode="head", layer=1, head=2)
    att = r.maps[1].array()[0, 2]
    mean = att.mean(axis=0)  # every tile's and the global image's rows
    tiles = [vb.on_grid(labels, mean, rf"tile {k}·\((\d+),(\d+)\)") for k in range(4)]
    assert v.queries[v.query][0] == "all patches (mean)"
    np.testing.assert_allclose(v.patch_map, np.block([tiles[:2], tiles[2:]]), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(v.global_map, vb.on_grid(labels, mean, r"\((\d+),(\d+)\)"), rtol=1e-5, atol=1e-8)
    assert "grid 12×12 (tiles in place, patches at keys 0–143 of the tower)" in v.info.text()
    check_image(w, figure(w, v))
    # a click on tile 3's patch (1, 4) (bottom right tile): its row over its own tile, named by tile and cell
    h, wd = v._image_size
    scene = v.vb.mapViewToScene(QPointF((6 + 4 + 0.5) * wd / 12, (6 + 1 + 0.5) * h / 12))
    qtbot.mouseClick(v.glw.viewport(), Qt.MouseButton.LeftButton, pos=v.glw.mapFromScene(scene))
    label, row = v.queries[v.query]
    assert (label, labels[row]) == ("tile 3 patch (1, 4)", "tile 3·(1,4)")
    own = vb.on_grid(labels, att[row], r"tile 3·\((\d+),(\d+)\)")
    np.testing.assert_allclose(v.patch_map[6:, 6:], own, rtol=1e-5, atol=1e-8)
    assert own.sum() == pytest.approx(1.0, rel=1e-4) and not v.global_map.any()
    # a click on the global image's patch (2, 5)
    scene = v.gvb.mapViewToScene(QPointF((5 + 0.5) * wd / 6, (2 + 0.5) * h / 6))
    qtbot.mouseClick(v.glw.viewport(), Qt.MouseButton.LeftButton, pos=v.glw.mapFromScene(scene))
    label, row = v.queries[v.query]
    assert (label, labels[row]) == ("global image patch (2, 5)", "(2,5)")
    np.testing.assert_allclose(v.global_map, vb.on_grid(labels, att[row], r"\((\d+),(\d+)\)"), rtol=1e-5, atol=1e-8)
    check_image(w, figure(w, v))


def test_extract_runs_it_and_a_missing_processor_config_is_one_line(idefics3_repo, tmp_path, capsys):
    import shutil

    from attnviz.cli import main
    from attnviz.core import io

    enc = idefics3_repo / "onnx" / "vision_encoder.onnx"
    assert main(["extract", str(enc), "--image", str(SAMPLE), "--out", str(tmp_path / "t.npz")]) == 0
    back = io.load_npz(tmp_path / "t.npz")
    assert back.maps[0].shape == (1, 4, 180, 180) and back.patch_grid.tile_layout == (2, 2)
    (tmp_path / "repo" / "onnx").mkdir(parents=True)
    shutil.copy(idefics3_repo / "config.json", tmp_path / "repo" / "config.json")
    shutil.copy(enc, tmp_path / "repo" / "onnx" / enc.name)
    capsys.readouterr()
    alone = tmp_path / "repo" / "onnx" / enc.name
    code = main(["extract", str(alone), "--image", str(SAMPLE), "--out", str(tmp_path / "x.npz")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "no preprocessor_config.json is beside it" in err
