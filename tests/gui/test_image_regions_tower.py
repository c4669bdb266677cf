"""Image regions of a vision–language model: the researcher picks what lies over the picture, the words' attention
over the image (as it opens) or the vision tower's own (patch to patch), per image of a prompt that held two.

The tiny Qwen2-VL in the real window with two images: switching to the vision tower selects its block (the layer and
head controls are its own), and each image shows the mean of its patches' rows, then a clicked patch's row, of the
vision block's map, placed on the patch grid by hand from the keys' labels (``img2(r,c)``: the tower keeps its
patches in 2 × 2 merge order); the overlay's pixels are that grid's heat; switching back draws the words' rows again;
File ▸ Export view and ``attnviz figure --view image --block 0 --picture N`` draw the same grid."""

from __future__ import annotations

import re

import numpy as np
import pytest
import vlm_build
from gui_helpers import open_and_wait
from screen_figure import check_image, figure

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("matplotlib")

PROMPT = "<|vision_start|><|image_pad|><|vision_end|>dog<|vision_start|><|image_pad|><|vision_end|>where the cat"


def placed(labels: list[str], row: np.ndarray, pattern: str) -> np.ndarray:
    return vlm_build.on_grid(labels, row, pattern)


def heat_alpha(want: np.ndarray, shape: tuple[int, int], base: str) -> np.ndarray:
    """The overlay's opacity for the patch grid ``want`` drawn ``shape`` large: the grid smoothly upsampled over
    the top of its drawing (sampled 8 times a cell)."""
    from attnviz.core import view as vm

    top = float(vm.upsample(want, (8 * want.shape[0], 8 * want.shape[1])).max())
    return vm.overlay_alpha(np.clip(vm.upsample(want, shape) / top, 0, 1), base)


@pytest.fixture
def two_images(tmp_path):
    return vlm_build.two_random_images(tmp_path)  # 6 x 8 and 6 x 10 tower patches


def _click(qtbot, v, x: float, y: float) -> None:
    from PySide6.QtCore import QPointF, Qt

    scene = v.vb.mapViewToScene(QPointF(x, y))
    qtbot.mouseClick(v.glw.viewport(), Qt.MouseButton.LeftButton, pos=v.glw.mapFromScene(scene))


def test_switching_to_the_vision_tower_draws_its_patch_rows_over_each_image(
    qtbot, real_window, qwen2vl_repo, two_images, tmp_path
):
    w = real_window
    open_and_wait(qtbot, w, qwen2vl_repo, text=PROMPT, image=two_images)
    r = w.session.result
    w.select_view("image")
    v = w.image_regions
    box = v.from_box
    assert box.isVisible() and [box.itemText(i) for i in range(box.count())] == ["words → image", "vision tower"]
    assert box.currentIndex() == 0 and w.session.blocks[v.source()[0]].stack == "decoder"  # opens on the words
    box.setCurrentIndex(1)  # as a user picks it
    s = w.session
    assert s.sel.image_from == "tower" and s.blocks[s.sel.block].stack == "encoder"  # the block box follows
    assert v.source()[0] == s.sel.block
    labels = list(s.blocks[s.sel.block].key_axis.labels)
    tower = [i for i, site in enumerate(r.sites) if site.stack == "encoder"]
    # the sidebar's layer and head: the tower's (heat_alpha: the heat stretched to the map, as drawn on "map")
    s.select(mode="head", layer=1, head=2, scale="map")
    for picture in (1, 0):
        v.picture_box.setCurrentIndex(picture)
        assert s.sel.picture == picture and s.sel.image_from == "tower"
        pattern = rf"img{picture + 1}\((\d+),(\d+)\)"
        mine = [k for k, lab in enumerate(labels) if re.fullmatch(pattern, lab)]
        row = r.maps[tower[1]].array()[0, 2]
        # no CLS in Qwen2-VL's tower: the mean of this image's patches' rows (the attention each patch receives)
        assert [q[0] for q in v.queries] == ["all patches (mean)"]
        want = placed(labels, row[mine].mean(axis=0), pattern)
        assert want.shape == [(6, 8), (6, 10)][picture]
        np.testing.assert_allclose(v.patch_map, want, rtol=1e-5, atol=1e-8)
        drawn = v.overlay_item.image  # the pixels over the picture: that grid's heat
        np.testing.assert_allclose(
            drawn[..., 3] / 255.0, heat_alpha(want, drawn.shape[:2], s.sel.image_base), atol=1 / 255
        )
        assert np.array_equal(v.base_image(v.source()[1]), r.images[picture])  # over this image
        assert f"image {picture + 1} of 2" in v.info.text() and "vision self-attention" in v.info.text()
        check_image(w, figure(w, v))  # File ▸ Export view: the same image, heat and query
        # a click on the image: that patch's row (image 2, say, row 4 col 7 of 6 x 10)
        h, wd = v._image_size
        rr, cc = (4, 7) if picture else (1, 2)
        grid = v.source()[1]
        _click(qtbot, v, (cc + 0.5) * wd / grid.cols, (rr + 0.5) * h / grid.rows)
        key = labels.index(f"img{picture + 1}({rr},{cc})")
        assert v.queries[v.query] == (f"patch ({rr}, {cc})", key)
        np.testing.assert_allclose(v.patch_map, placed(labels, row[key], pattern), rtol=1e-5, atol=1e-8)
        check_image(w, figure(w, v))
    # the command line's figure of the tower over image 2 (its default query: the mean) draws the same grid
    from attnviz.figures import FigureSpec, render_spec

    fig = render_spec(r, FigureSpec(view="image", block=0, layer=1, head=2, picture=2, dpi=40))
    ax = next(a for a in fig.axes if len(a.images) == 2)
    rgba = np.asarray(ax.images[1].get_array())
    mine = [k for k, lab in enumerate(labels) if lab.startswith("img2(")]
    want = placed(labels, r.maps[tower[1]].array()[0, 2][mine].mean(axis=0), r"img2\((\d+),(\d+)\)")
    np.testing.assert_allclose(rgba[..., 3], heat_alpha(want, rgba.shape[:2], "grey"), atol=1e-6)
    assert fig.attnviz_selection.image_from == "tower"  # --block 0 alone: the tower, as its block on screen
    # back to the words: a word's row of the decoder over image 1's tokens (img1(r,c)), as the view opened
    box.setCurrentIndex(0)
    assert s.sel.image_from == "words" and s.blocks[s.sel.block].stack == "decoder"
    keys = list(s.blocks[s.sel.block].key_axis.labels)
    decoder = [i for i, site in enumerate(r.sites) if site.stack == "decoder"]
    cat = next(i for i, q in enumerate(v.queries) if q[0] == "cat")
    v.set_query(cat)
    want = placed(keys, r.maps[decoder[1]].array()[0, 2, v.queries[cat][1]], r"img1\((\d+),(\d+)\)")
    np.testing.assert_allclose(v.patch_map, want, rtol=1e-5, atol=1e-8)


def test_the_sidebars_block_drives_the_chooser_in_one_redraw(qtbot, real_window, qwen2vl_repo, two_images):
    """Picking the tower's block in the sidebar's block box draws the tower (the chooser follows, its rows placed by
    hand), picking the decoder's draws the words: one selection change, one redraw each; other tabs as they were."""
    w = real_window
    open_and_wait(qtbot, w, qwen2vl_repo, text=PROMPT, image=two_images)
    r, s, v = w.session.result, w.session, w.image_regions
    w.select_view("image")
    tower_block = next(i for i, b in enumerate(s.blocks) if b.stack == "encoder")
    decoder_block = next(i for i, b in enumerate(s.blocks) if b.stack == "decoder")
    assert s.sel.block == decoder_block and v.from_box.currentData() == "words"
    changes, draws = [], []
    s.selection_changed.connect(lambda: changes.append(s.sel))
    draw = v.draw
    v.draw = lambda: (draws.append(s.sel), draw())[1]  # type: ignore[method-assign]
    w.controls.block.setCurrentIndex(tower_block)  # as a user picks it
    assert len(changes) == 1 and len(draws) == 1 and s.sel.block == tower_block
    assert s.sel.image_from == "tower" and v.from_box.currentData() == "tower" and v.source()[0] == tower_block
    labels = list(s.blocks[tower_block].key_axis.labels)
    tower = [i for i, site in enumerate(r.sites) if site.stack == "encoder"]
    mine = [k for k, lab in enumerate(labels) if lab.startswith("img1(")]
    last = r.maps[tower[-1]].array()[0].mean(axis=0)  # the window's mean over the heads of the last layer
    want = placed(labels, last[mine].mean(axis=0), r"img1\((\d+),(\d+)\)")
    np.testing.assert_allclose(v.patch_map, want, rtol=1e-5, atol=1e-8)
    check_image(w, figure(w, v))  # File ▸ Export view: the same tower
    changes.clear(), draws.clear()
    w.controls.block.setCurrentIndex(decoder_block)
    assert len(changes) == 1 and len(draws) == 1
    assert s.sel.image_from == "words" and v.from_box.currentData() == "words" and v.source()[0] == decoder_block
    # another tab: the block box moves the block as it did; Image regions opens on what that block draws
    w.select_view("heatmap")
    w.controls.block.setCurrentIndex(tower_block)
    assert s.sel.block == tower_block and s.sel.image_from == "tower"
    w.select_view("image")
    assert s.sel.block == tower_block and v.from_box.currentData() == "tower"
