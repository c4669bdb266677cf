"""An Idefics3 / SmolVLM tower's frames (the processor's tiles and its global image) are named by their place in the
split whether the whole model is opened or its vision file alone: "tile 1 (row 0, col 1)", never a bare "tile 1"
where the split is known.  Checked against transformers' own processor: its image processor's rows × cols of each
image (``return_row_col_info``) and the ``<row_r_col_c>`` marker its prompt puts before each tile's tokens, tile by
tile; images split 1 × 2 and 2 × 1 tell rows from columns.  The whole model reads the split from the prompt's
markers (a run from raw feeds has no image loaded), so its grids carry it as the tower alone's do, and an
extracted ``.npz`` keeps it (a file written before it did is named from its decoder's token grid)."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import idefics3_models as im
import vlm_build as vb
from PIL import Image

from attnviz.cli import main
from attnviz.core import io
from attnviz.core import view as v
from attnviz.core.patch_names import canonical
from attnviz.runtime import open_model

PROMPT = "<s> <image> a photo of the cat"
TWO = "<s> <image> a photo <image> of the cat"
SHAPES = {"wide": (40, 100), "tall": (100, 40), "square": (70, 64)}  # (h, w): 1 x 2, 2 x 1 and 2 x 2 tiles
MARKER = re.compile(r"<row_(\d+)_col_(\d+)>")


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("frame_names")
    return {k: vb.random_image(d / f"{k}.png", h, w, seed) for seed, (k, (h, w)) in enumerate(SHAPES.items())}


@pytest.fixture(scope="module")
def whole(idefics3_repo):
    return open_model(idefics3_repo, provider="cpu")


@pytest.fixture(scope="module")
def tower(idefics3_repo):
    return open_model(idefics3_repo / "onnx" / "vision_encoder.onnx", provider="cpu")


def _rgb(path):
    return Image.open(path).convert("RGB")


def reference(repo, text, rows_of_images):
    """transformers' processor on ``text`` (one per row) with each row's images: its inputs, each image's split
    (rows, cols) from its image processor, and each row's tiles' cells as its prompt's markers name them, tile
    by tile, per image (an image's markers end at the ``<global-img>`` its global image follows)."""
    proc = im.processor(repo)
    pil = [[_rgb(p) for p in row] for row in rows_of_images]
    texts = [text] if isinstance(text, str) else text
    enc = proc(text=texts, images=pil, return_tensors="np", padding=True)
    info = proc.image_processor(pil, return_row_col_info=True, return_tensors="np")
    splits = [list(zip(r, c)) for r, c in zip(info["rows"], info["cols"])]
    cells = []
    for ids in enc["input_ids"]:
        images, tiles = [], []
        for t in proc.tokenizer.convert_ids_to_tokens(ids.tolist()):
            m = MARKER.fullmatch(t)
            if m:
                tiles.append((int(m[1]) - 1, int(m[2]) - 1))
            elif t == "<global-img>":
                images.append(tiles)
                tiles = []
        cells.append(images)
    return enc, splits, cells


def names(split, cells, image: str = "") -> list[str]:
    """The frames' names from transformers' split and markers: tile k at the cell its marker names (checked to
    be reading order over the image processor's rows × cols), then the global image."""
    rows, cols = (int(x) for x in split)
    assert cells == [divmod(k, cols) for k in range(rows * cols)]  # the two references agree
    out = [f"tile {k} (row {r}, col {c})" for k, (r, c) in enumerate(cells)] + ["global image"]
    return [f"{image} · {n}" if image else n for n in out]


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_whole_model_and_the_tower_alone_name_each_frame_by_its_place(whole, tower, idefics3_repo, images, shape):
    _, splits, cells = reference(idefics3_repo, PROMPT, [[images[shape]]])
    want = names(splits[0][0], cells[0][0])
    r = whole.analyze(text=PROMPT, image=images[shape])
    alone = tower.analyze(image=images[shape])
    assert v.tower_frames(r, v.Selection()) == want == v.tower_frames(alone, v.Selection())
    assert r.patch_grid.tile_layout == tuple(int(x) for x in splits[0][0]) == alone.patch_grid.tile_layout
    # the Head map's title and --frame's refusal name the frame the same way
    assert want[1] in v.head_map(r, v.Selection(frame=1, mode="mean")).title
    with pytest.raises(v.ViewError, match=re.escape(f"frames 1–{len(want)} ({want[0]} … global image)")):
        v.check_frame(r, v.Selection(frame=len(want)))


def test_one_prompts_several_images_name_each_images_tiles_by_their_place(whole, idefics3_repo, images):
    two = [images["wide"], images["tall"]]
    _, splits, cells = reference(idefics3_repo, TWO, [two])
    want = names(splits[0][0], cells[0][0], "image 1") + names(splits[0][1], cells[0][1], "image 2")
    r = whole.analyze(text=TWO, image=two)
    assert v.tower_frames(r, v.Selection()) == want
    assert [g.tile_layout for g in r.vision_grids()] == [tuple(int(x) for x in s) for s in splits[0]]


def test_a_batch_from_raw_feeds_names_each_rows_frames_from_its_prompt(whole, idefics3_repo, images):
    """Rows of as many frames split differently (1 x 2, 2 x 1): each row's own names, read from its ids alone
    (no image was loaded: the feeds are transformers' processor's)."""
    enc, splits, cells = reference(
        idefics3_repo, ["<image> a cat", "red <image> dog"], [[images["wide"]], [images["tall"]]]
    )
    r = whole.analyze(feeds={k: enc[k] for k in ("pixel_values", "input_ids", "attention_mask")})
    for b in range(2):
        assert v.tower_frames(r, v.Selection(batch=b)) == names(splits[b][0], cells[b][0])


def test_an_extracted_file_keeps_the_names_and_an_older_one_reads_them_off_its_tokens(idefics3_repo, images, tmp_path):
    _, splits, cells = reference(idefics3_repo, PROMPT, [[images["tall"]]])
    want = names(splits[0][0], cells[0][0])
    out = tmp_path / "whole.npz"
    assert main(["extract", str(idefics3_repo), "--text", PROMPT, "--image", images["tall"], "--out", str(out)]) == 0
    with np.load(out) as z:
        assert z["patch_grid_tiles"].tolist() == [int(x) for x in splits[0][0]]
        older = {k: z[k] for k in z.files if k != "patch_grid_tiles"}  # as written before the grid named the split
    assert v.tower_frames(io.load_npz(out), v.Selection()) == want
    np.savez(tmp_path / "older.npz", **older)
    assert v.tower_frames(io.load_npz(tmp_path / "older.npz"), v.Selection()) == want


def patches_by_hand(split, cells, image: int | None = None, side: int = im.TILE // im.PATCH) -> list[str]:
    """Every tower key's label, written here from transformers' split and markers: tile k's patch (r, c) of that
    tile ``tile k·(r,c)`` (the tile as its frame is named, "tile k (row …, col …)"), then the global image's
    ``(r,c)``; one prompt's image ``i`` among several ``img{i}·tile k·(r,c)``, ``img{i}(r,c)``.  ``side``: the
    tower's patches a tile side (before the pixel shuffle; the decoder's features: ``im.SIDE``)."""
    cell = [f"({p // side},{p % side})" for p in range(side * side)]
    tiles = names(split, cells)[:-1]
    out = [f"{t.split(' (')[0]}·{c}" for t in tiles for c in cell] + cell
    return [f"img{image}{'' if x.startswith('(') else '·'}{x}" for x in out] if image else out


def old_decoder_labels(split, cells, image: int | None = None) -> list[str]:
    """The decoder's image tokens as labelled before session 20, written here: ``t{k}[r,c]``, ``g[r,c]``
    (``img{i}.t{k}[r,c]``, ``img{i}.g[r,c]`` among several images)."""
    side = im.SIDE
    cell = [f"[{p // side},{p % side}]" for p in range(side * side)]
    out = [f"t{k}{c}" for k in range(len(names(split, cells)) - 1) for c in cell] + [f"g{c}" for c in cell]
    return [f"img{image}.{x}" for x in out] if image else out


def image_tokens(enc, row: int = 0) -> list[int]:
    return [k for k, i in enumerate(enc["input_ids"][row].tolist()) if i == im.IMAGE_TOKEN]


@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_patch_names_its_tile_as_the_frames_do(whole, tower, idefics3_repo, images, shape):
    """The tower's keys (the whole model's and the tower alone's alike) name a tile's patch by the tile as the Head
    map's frame box names it: every key of frame "tile 1 (row 0, col 1)" reads ``tile 1·(r,c)``, never ``t1(r,c)``."""
    _, splits, cells = reference(idefics3_repo, PROMPT, [[images[shape]]])
    want = patches_by_hand(splits[0][0], cells[0][0])
    r = whole.analyze(text=PROMPT, image=images[shape])
    alone = tower.analyze(image=images[shape])
    assert list(r.blocks()[0].key_axis.labels) == want == list(alone.blocks()[0].key_axis.labels)
    frames, per = v.tower_frames(r, v.Selection()), len(want) // len(cells[0][0] + [None])
    for f, name in enumerate(frames[:-1]):  # each frame's Head map: its axis labels all start with the frame's tile
        view = v.head_map(r, v.Selection(frame=f, mode="mean"))
        assert name in view.title and all(k.startswith(name.split(" (")[0] + "·") for k in view.k_labels)
        assert list(view.k_labels) == want[f * per : (f + 1) * per]


def test_one_prompts_several_images_name_each_patch_by_its_image_and_tile(whole, idefics3_repo, images):
    two = [images["wide"], images["tall"]]
    _, splits, cells = reference(idefics3_repo, TWO, [two])
    want = patches_by_hand(splits[0][0], cells[0][0], 1) + patches_by_hand(splits[0][1], cells[0][1], 2)
    r = whole.analyze(text=TWO, image=two)
    assert list(r.blocks()[0].key_axis.labels) == want


def test_an_older_files_tile_labels_still_name_its_frames(idefics3_repo, images, tmp_path):
    """An .npz written before session 19 labels a tile's patch ``t1(0,4)`` (``img2.t0(0,0)``): its frames are still
    named by their place."""
    _, splits, cells = reference(idefics3_repo, PROMPT, [[images["square"]]])
    out = tmp_path / "whole.npz"
    assert main(["extract", str(idefics3_repo), "--text", PROMPT, "--image", images["square"], "--out", str(out)]) == 0
    r = io.load_npz(out)
    blk = r.blocks()[0]
    old = [re.sub(r"^tile (\d+)·", r"t\1", k) for k in blk.key_axis.labels]
    assert old[0] == "t0(0,0)" and old[-1].startswith("(")
    blk.key_axis.labels[:] = old
    assert v.tower_frames(r, v.Selection(), [blk, *r.blocks()[1:]]) == names(splits[0][0], cells[0][0])


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_decoders_image_tokens_name_their_tile_as_the_towers_patches_do(whole, idefics3_repo, images, shape):
    """A decoder row's image columns read as the tower's keys do: tile k's feature (r, c) ``tile k·(r,c)``, the
    global image's ``(r,c)``, at the places transformers' processor puts the image tokens; every tile's tokens
    and that tile's frame in the tower carry the same tile name.  An older file's ``t1[0,4]`` / ``g[0,4]`` read as
    today's (core/patch_names.canonical)."""
    enc, splits, cells = reference(idefics3_repo, PROMPT, [[images[shape]]])
    want = patches_by_hand(splits[0][0], cells[0][0], side=im.SIDE)
    r = whole.analyze(text=PROMPT, image=images[shape])
    decoder = r.blocks()[-1].key_axis.labels
    assert r.blocks()[-1].stack == "decoder" and len(decoder) == enc["input_ids"].shape[1]
    assert [decoder[k] for k in image_tokens(enc)] == want
    tower = r.blocks()[0].key_axis.labels
    tile = re.compile(r"(tile \d+·|)\(\d+,\d+\)")  # the tile part of a label ("" for the global image)
    assert sorted({tile.fullmatch(x)[1] for x in want}) == sorted({tile.fullmatch(x)[1] for x in tower})
    old = old_decoder_labels(splits[0][0], cells[0][0])
    assert old[0] == "t0[0,0]" and [canonical(x) for x in old] == want


def test_an_extracted_file_keeps_the_decoders_names(idefics3_repo, images, tmp_path):
    enc, splits, cells = reference(idefics3_repo, PROMPT, [[images["square"]]])
    out = tmp_path / "whole.npz"
    assert main(["extract", str(idefics3_repo), "--text", PROMPT, "--image", images["square"], "--out", str(out)]) == 0
    r = io.load_npz(out)
    decoder = r.blocks()[-1].key_axis.labels
    assert [decoder[k] for k in image_tokens(enc)] == patches_by_hand(splits[0][0], cells[0][0], side=im.SIDE)
    # a file written before session 20 (t0[0,0] / g[0,0] on the decoder's image tokens) draws the same
    sel = v.Selection(block=len(r.blocks()) - 1, mode="mean")
    now = v.overlay_view(r, sel)
    blk = r.blocks()[-1]
    for k, old in zip(image_tokens(enc), old_decoder_labels(splits[0][0], cells[0][0])):
        blk.key_axis.labels[k] = old
    then = v.overlay_view(r, sel, blocks=[*r.blocks()[:-1], blk])
    assert then.query_label == now.query_label and blk.key_axis.labels[image_tokens(enc)[0]] == "t0[0,0]"
    np.testing.assert_array_equal(then.patch, now.patch)
    assert then.global_panel is not None and then.title == now.title and then.peak == now.peak
    np.testing.assert_array_equal(then.global_panel.patch, now.global_panel.patch)


def test_one_prompts_several_images_name_each_decoder_token_by_its_image_and_tile(whole, idefics3_repo, images):
    two = [images["wide"], images["tall"]]
    enc, splits, cells = reference(idefics3_repo, TWO, [two])
    want = [patches_by_hand(splits[0][i], cells[0][i], i + 1, side=im.SIDE) for i in range(2)]
    r = whole.analyze(text=TWO, image=two)
    decoder = r.blocks()[-1].key_axis.labels
    assert [decoder[k] for k in image_tokens(enc)] == want[0] + want[1]
    assert want[0][0] == "img1·tile 0·(0,0)" and want[1][-1] == f"img2({im.SIDE - 1},{im.SIDE - 1})"
    old = [old_decoder_labels(splits[0][i], cells[0][i], i + 1) for i in range(2)]
    assert [canonical(x) for x in old[0] + old[1]] == want[0] + want[1]
    # the tower's keys carry the same image and tile names
    tile = re.compile(r"(img\d+)(·tile \d+|)·?\(\d+,\d+\)")
    assert {tile.fullmatch(x).groups() for x in want[0] + want[1]} == {
        tile.fullmatch(x).groups() for x in r.blocks()[0].key_axis.labels
    }
