"""Image regions of a tiled vision–language image (Idefics3 / SmolVLM): the vision tower's own attention over every
tile, not only the global image.  Each tile is a tower run of its own (keys ``tile k·(r,c)``, then the global image's
``(r,c)``); the tiny Idefics3 in the real window on the 64 px sample (resized to 96: 2 x 2 tiles of 48) draws, with
"vision tower" chosen, the tiles side by side where the words' view lays them and the global image beside them, each
cell the row's weight on the key its label names (placed by hand), on screen and in the exported figure."""

from __future__ import annotations

import re
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
PROMPT = "<s> <image> a photo of the cat"


def tiles_by_hand(labels: list[str], row: np.ndarray, across: int) -> np.ndarray:
    """Tile ``k``'s patch ``(r, c)`` (``tile k·(r,c)``, tiles in reading order, ``across`` a row) at its cell of the
    tiled picture."""
    found = [
        (int(m[1]), int(m[2]), int(m[3]), k)
        for k, lab in enumerate(labels)
        if (m := re.fullmatch(r"tile (\d+)·\((\d+),(\d+)\)", lab))
    ]
    side = 1 + max(r for _, r, _, _ in found)
    down = (1 + max(t for t, *_ in found)) // across
    out = np.full((down * side, across * side), np.nan, np.float32)
    for t, r, c, k in found:
        out[(t // across) * side + r, (t % across) * side + c] = row[k]
    assert not np.isnan(out).any()
    return out


def global_by_hand(labels: list[str], row: np.ndarray) -> np.ndarray:
    found = [(int(m[1]), int(m[2]), k) for k, lab in enumerate(labels) if (m := re.fullmatch(r"\((\d+),(\d+)\)", lab))]
    out = np.zeros((1 + max(r for r, _, _ in found), 1 + max(c for _, c, _ in found)), np.float32)
    for r, c, k in found:
        out[r, c] = row[k]
    return out


def test_the_towers_attention_over_every_tile_and_the_global_image(qtbot, real_window, idefics3_repo):
    from PySide6.QtCore import QPointF, Qt

    w = real_window
    open_and_wait(qtbot, w, idefics3_repo, text=PROMPT, image=str(SAMPLE))
    r, s, v = w.session.result, w.session, w.image_regions
    w.select_view("image")
    v.from_box.setCurrentIndex(v.from_box.findData("tower"))  # as a user picks it
    bi, grid, kind = v.source()
    assert s.blocks[bi].stack == "encoder" and s.sel.block == bi and (grid.rows, grid.cols) == (12, 12)
    labels = list(s.blocks[bi].key_axis.labels)
    tower = [i for i, site in enumerate(r.sites) if site.stack == "encoder"]
    s.select(mode="head", layer=1, head=2)
    att = r.maps[tower[1]].array()[0, 2]
    mean = att[: len(labels)].mean(axis=0)  # every tile's and the global image's rows: the attention each receives
    assert v.queries[v.query][0] == "all patches (mean)"
    np.testing.assert_allclose(v.patch_map, tiles_by_hand(labels, mean, 2), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(v.global_map, global_by_hand(labels, mean), rtol=1e-5, atol=1e-8)
    assert "grid 12×12 (tiles in place, patches at keys 0–143 of the tower)" in v.info.text()
    assert v._two and [c.textItem.toPlainText() for c in v.captions if c.isVisible()][0].startswith("tiles · ")
    check_image(w, figure(w, v))  # File ▸ Export view: the same tiles, global image, heat and captions
    # a click on tile 3's patch (1, 4) (bottom right tile): that patch's row, over its own tile only
    h, wd = v._image_size
    scene = v.vb.mapViewToScene(QPointF((6 + 4 + 0.5) * wd / 12, (6 + 1 + 0.5) * h / 12))
    qtbot.mouseClick(v.glw.viewport(), Qt.MouseButton.LeftButton, pos=v.glw.mapFromScene(scene))
    label, row = v.queries[v.query]
    # named by its tile and its cell in it, as its key (tile 3·(1,4)), not by its cell (7, 10) of the tiled picture
    assert label == "tile 3 patch (1, 4)" and labels[row] == "tile 3·(1,4)"
    assert "query “tile 3 patch (1, 4)”" in v.info.text()
    want = tiles_by_hand(labels, att[row], 2)
    np.testing.assert_allclose(v.patch_map, want, rtol=1e-5, atol=1e-8)
    assert want[6:, 6:].sum() == pytest.approx(1.0, rel=1e-4) and not v.global_map.any()  # its own run's row
    check_image(w, figure(w, v))
    # a click on tile 0's patch (0, 0) replaces it: one clicked patch at a time, named by its tile too
    before = [q for q in v.queries if q != (label, row)]
    scene = v.vb.mapViewToScene(QPointF(0.5 * wd / 12, 0.5 * h / 12))
    qtbot.mouseClick(v.glw.viewport(), Qt.MouseButton.LeftButton, pos=v.glw.mapFromScene(scene))
    label, row = v.queries[v.query]
    assert label == "tile 0 patch (0, 0)" and labels[row] == "tile 0·(0,0)" and v.queries == [*before, (label, row)]
    # the command line's figure of the tower's block draws the same tiles (its default query: the mean)
    from attnviz.figures import FigureSpec, render_spec

    fig = render_spec(r, FigureSpec(view="image", block=0, layer=1, head=2, dpi=40))
    assert fig.attnviz_selection.image_from == "tower"
    assert len([a for a in fig.axes if len(a.images) == 2]) == 2  # the tiles' picture and the global image's


def named(label: str) -> str:
    """A tower key's label (``tile 2·(3,4)``, the global image's ``(3,4)``) as a patch is named, written here by hand."""
    if m := re.fullmatch(r"tile (\d+)·\((\d+),(\d+)\)", label):
        return f"tile {m[1]} patch ({m[2]}, {m[3]})"
    m = re.fullmatch(r"\((\d+),(\d+)\)", label)
    return f"global image patch ({m[1]}, {m[2]})"


def top(labels: list[str], row: np.ndarray, pattern: str) -> str:
    return labels[max((k for k, lab in enumerate(labels) if re.fullmatch(pattern, lab)), key=lambda k: row[k])]


def test_the_global_images_patches_and_peak_are_named_as_the_global_image(qtbot, real_window, idefics3_repo):
    """The info line names the global image's peak as its clicked patch is named, "global image patch (r, c)" (it
    said "peak at (r, c)", no image named), each from the key's label; the exported figure's title names the
    clicked global patch the same."""
    from PySide6.QtCore import QPointF, Qt

    w = real_window
    open_and_wait(qtbot, w, idefics3_repo, text=PROMPT, image=str(SAMPLE))
    r, s, v = w.session.result, w.session, w.image_regions
    w.select_view("image")
    v.from_box.setCurrentIndex(v.from_box.findData("tower"))
    bi = v.source()[0]
    labels = list(s.blocks[bi].key_axis.labels)
    s.select(mode="head", layer=1, head=2)
    att = r.maps[[i for i, site in enumerate(r.sites) if site.stack == "encoder"][1]].array()[0, 2]
    mean = att[: len(labels)].mean(axis=0)
    tile, whole = top(labels, mean, r"tile \d+·\(\d+,\d+\)"), top(labels, mean, r"\(\d+,\d+\)")
    want = f"peak at {named(tile)} · global image 6×6 beside them, peak at {named(whole)} · colours "
    assert want in v.info.text()
    # a click on the global image's patch (4, 1): named so on its button, in the info line and in the export
    h, wd = v._image_size
    scene = v.gvb.mapViewToScene(QPointF((1 + 0.5) * wd / 6, (4 + 0.5) * h / 6))
    qtbot.mouseClick(v.glw.viewport(), Qt.MouseButton.LeftButton, pos=v.glw.mapFromScene(scene))
    label, row = v.queries[v.query]
    assert (label, labels[row]) == ("global image patch (4, 1)", "(4,1)")
    assert v.query_bar.buttons[v.query].text() == label and f"query “{label}”" in v.info.text()
    peak = named(top(labels, att[row], r"\(\d+,\d+\)"))  # its row lies on the global image's own keys
    assert f"global image 6×6 beside them, peak at {peak} · colours " in v.info.text()
    check_image(w, figure(w, v))  # the figure's title: query “global image patch (4, 1)”


def test_a_tower_without_the_decoders_tokens_says_its_tiles_are_not_drawn(qtbot, real_window, idefics3_repo, tmp_path):
    """How a tower with no decoder grid arises: the repository without its tokenizer, run on raw feeds (the
    processor's) and its maps opened.  The tiles' layout is unknown (the decoder's image tokens say it), so the
    global image is drawn alone and the info line says that its tiles are not drawn and why."""
    import shutil

    import idefics3_models as im
    from PIL import Image
    from PySide6.QtCore import QPointF, Qt

    from attnviz.cli import main

    bare = tmp_path / "bare"
    shutil.copytree(idefics3_repo, bare)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (bare / name).unlink()
    enc = im.processor(idefics3_repo)(text=[PROMPT], images=[[Image.open(SAMPLE).convert("RGB")]], return_tensors="np")
    np.savez(tmp_path / "feeds.npz", **{k: enc[k] for k in ("pixel_values", "input_ids", "attention_mask")})
    out = tmp_path / "maps.npz"
    assert main(["extract", str(bare), "--inputs", str(tmp_path / "feeds.npz"), "--out", str(out)]) == 0
    w = real_window
    open_and_wait(qtbot, w, out)
    w.select_view("image")
    v, s = w.image_regions, w.session
    bi, grid, _ = v.source()  # the words' attention has no image tokens to look at: the tower, with no choice
    labels = list(s.blocks[bi].key_axis.labels)
    assert s.blocks[bi].stack == "encoder" and v.from_box.isHidden()
    assert (grid.rows, grid.cols) == (6, 6) and not v._two and v.global_map is None
    assert [labels[grid.key(rr, c)] for rr in range(6) for c in range(6)] == [
        f"({rr},{c})" for rr in range(6) for c in range(6)
    ]
    mean = s.blocks[bi].layer(s.sel.layer).mean(axis=0)[grid.offset :].mean(axis=0)  # the global image's rows
    assert (
        "grid 6×6 (global image only: its 4 tiles at keys 0–143 of the tower not drawn, no decoder image tokens to "
        f"lay them out) · peak at {named(top(labels, mean, r'[(][0-9]+,[0-9]+[)]'))} · colours "
    ) in v.info.text()
    # a click on its patch (2, 5): named as the global image's, as beside the tiles
    h, wd = v._image_size
    scene = v.vb.mapViewToScene(QPointF((5 + 0.5) * wd / 6, (2 + 0.5) * h / 6))
    qtbot.mouseClick(v.glw.viewport(), Qt.MouseButton.LeftButton, pos=v.glw.mapFromScene(scene))
    label, row = v.queries[v.query]
    assert (label, labels[row]) == ("global image patch (2, 5)", "(2,5)")
