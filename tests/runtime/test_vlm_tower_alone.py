"""An Idefics3 / SmolVLM vision encoder opened alone (``REPO/onnx/vision_encoder.onnx``), as researchers open only
the tower: ``--image`` goes through the family's processor (the tiles and the global image, from the repository's
preprocessor_config.json), the tower's maps are transformers' vision model's on the processor's own pixel values and
the same as that tower's block in the whole model's run, and Image regions lays every tile out beside the global
image from the processor's split, with the whole model's labels.  What cannot be done is one line naming the fix."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import idefics3_models as im  # noqa: E402
import vlm_build as vb  # noqa: E402
from PIL import Image  # noqa: E402

from attnviz import AttnvizError  # noqa: E402
from attnviz.core import io  # noqa: E402
from attnviz.core import view as v  # noqa: E402
from attnviz.runtime import builders as bd  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402
from attnviz.runtime.model import AttentionModel  # noqa: E402
from attnviz.runtime.request import AnalyzeRequest  # noqa: E402

PROMPT = "<s> <image> a photo of the cat"
TOL = 5e-4
SHAPES = {"wide": ((40, 100), (1, 2)), "tall": ((90, 30), (2, 1)), "square": ((70, 64), (2, 2))}  # (h, w), split


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("img")
    out = {}
    for name, (hw, _) in SHAPES.items():
        Image.fromarray((np.random.default_rng(3).random((*hw, 3)) * 255).astype(np.uint8)).save(d / f"{name}.png")
        out[name] = d / f"{name}.png"
    return out


@pytest.fixture(scope="module")
def torch_model():
    return im.build()


@pytest.fixture(scope="module")
def tower(idefics3_repo):
    return open_model(idefics3_repo / "onnx" / "vision_encoder.onnx", provider="cpu")


@pytest.fixture(scope="module")
def whole(idefics3_repo):
    return open_model(idefics3_repo, provider="cpu")


def processed(repo, path):
    """transformers' Idefics3Processor on one image (the prompt only carries the placeholder)."""
    return im.processor(repo)(text=[PROMPT], images=[[Image.open(path).convert("RGB")]], return_tensors="np")


def test_opens_as_the_familys_vision_tower(tower):
    assert (
        isinstance(tower, AttentionModel)
        and tower.frames is not None
        and tower.kind == "vision"
        and tower.frames.family is not None
    )
    assert [(s.stack, s.kind, s.layer) for s in tower.sites] == [("encoder", "self", 0), ("encoder", "self", 1)]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_image_is_the_processors_tiles_and_global_image(tower, idefics3_repo, images, shape):
    prep = bd.prepare(tower, AnalyzeRequest(image=str(images[shape])))
    want = processed(idefics3_repo, images[shape])["pixel_values"]
    rows, cols = SHAPES[shape][1]
    assert prep.feeds["pixel_values"].shape == want.shape == (1, rows * cols + 1, 3, im.TILE, im.TILE)
    assert np.abs(prep.feeds["pixel_values"] - want).max() < 1e-4


def test_maps_equal_transformers_vision_model_and_the_whole_models_tower(
    tower, whole, idefics3_repo, images, torch_model
):
    """Each frame's block of the tower's maps is transformers' vision model's attention on the processor's pixel
    values for that frame (an independent reference), nothing off the diagonal blocks; and the maps are the whole
    model's tower block on the same image."""
    r = tower.analyze(image=str(images["square"]))
    vision, _, _ = im.reference(torch_model, processed(idefics3_repo, images["square"]))
    n, p = len(vision[0]), vision[0].shape[-1]  # 5 frames (4 tiles + the global image), 36 patches each
    for got, want in zip(r.maps, vision, strict=True):
        a = got.array()
        assert a.shape == (1, im.HEADS, n * p, n * p)
        for t in range(n):
            assert np.abs(a[0, :, t * p : (t + 1) * p, t * p : (t + 1) * p] - want[t]).max() < TOL
        assert a.sum(-1) == pytest.approx(1.0, abs=1e-5)
    full = whole.analyze(text=PROMPT, image=str(images["square"]))
    for got, want in zip(r.maps, full.maps[: len(r.maps)], strict=True):
        np.testing.assert_allclose(got.array(), want.array(), atol=1e-6)
    assert r.blocks()[0].key_axis.labels == full.blocks()[0].key_axis.labels  # tile k·(r,c), then the global's (r,c)


def tiles_by_hand(labels: list[str], row: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Tile ``k`` (reading order, ``cols`` a row) at its place in the picture, each cell the weight on the key its
    label ``tile k·(r,c)`` names (vlm_build.on_grid); the processor's split ``rows`` x ``cols``."""
    each = [vb.on_grid(labels, row, rf"tile {k}·\((\d+),(\d+)\)") for k in range(rows * cols)]
    return np.vstack([np.hstack(each[r * cols : (r + 1) * cols]) for r in range(rows)])


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_tower_view_lays_every_tile_beside_the_global_image(tower, whole, images, shape):
    """Image regions' tower view: the tiles where the processor's split puts them (no decoder to read it from) and
    the global image on its own grid beside them, each cell placed by hand from its key's label; a patch named as
    the whole model's tower view names it."""
    r = tower.analyze(image=str(images[shape]))
    rows, cols = SHAPES[shape][1]
    blocks = r.blocks()
    bi, grid, kind = v.image_source(r, blocks, attention="tower")
    labels = list(blocks[bi].key_axis.labels)
    assert (bi, kind) == (0, "self") and grid.global_grid is not None and r.patch_grid.tile_layout == (rows, cols)
    for layer in range(im.LAYERS):
        att = blocks[bi].layer(layer)[1]
        for q in (att.mean(axis=0), att[labels.index("tile 0·(2,3)")], att[labels.index("(4,1)")]):
            np.testing.assert_array_equal(grid.to_image(q), tiles_by_hand(labels, q, rows, cols))
            np.testing.assert_array_equal(grid.global_grid.to_image(q), vb.on_grid(labels, q, r"\((\d+),(\d+)\)"))
    last = rows * cols - 1
    assert v.patch_label(grid, labels.index(f"tile {last}·(1,4)")) == f"tile {last} patch (1, 4)"
    assert v.patch_label(grid, labels.index("(2,5)")) == "global image patch (2, 5)"
    assert v.image_queries(r, blocks[bi], grid) == [("all patches (mean)", -1)]
    assert v.grid_note(r, blocks[bi], grid) == f"tiles in place, patches at keys 0–{rows * cols * 36 - 1} of the tower"
    # the whole model's tower view over the same image: the same cells on the same keys
    full = whole.analyze(text=PROMPT, image=str(images[shape]))
    _, fgrid, _ = v.image_source(full, full.blocks(), attention="tower")
    assert (fgrid.rows, fgrid.cols, fgrid.columns) == (grid.rows, grid.cols, grid.columns)
    assert [fgrid.global_grid.key(a, b) for a in range(6) for b in range(6)] == [
        grid.global_grid.key(a, b) for a in range(6) for b in range(6)
    ]


def test_the_tower_block_is_named_as_the_whole_models(tower, whole, images, tmp_path):
    """The block reads "vision self-attention" alone as in the whole model (not "encoder", read as a text encoder's): the block,
    the map's title (Head map, figures), an extracted .npz; the command line's short name stays "encoder self"."""
    from attnviz.figures.select import block_label, resolve_block

    r = tower.analyze(image=str(images["wide"]))
    full = whole.analyze(text=PROMPT, image=str(images["wide"]))
    assert r.blocks()[0].name == full.blocks()[0].name == "vision self-attention"
    sel = v.Selection(block=0, layer=1, head=2)
    assert v.compute_map(r, sel).title.startswith("vision self-attention · layer 1 · head 2")
    io.save_npz(r, tmp_path / "t.npz")
    assert io.load_npz(tmp_path / "t.npz").blocks()[0].name == "vision self-attention"
    assert block_label(r.blocks()[0]) == block_label(full.blocks()[0]) == "encoder self"
    assert resolve_block(r, "vision self")[0] == resolve_block(r, "encoder self")[0] == 0


def test_inspect_names_the_towers_sites_vision(idefics3_repo, capsys):
    """`attnviz inspect` lists a tower's sites as every view names them ("vision"), alone and in the whole model;
    --json keeps the sites' own "encoder" (what scripts read back)."""
    import json

    from attnviz.cli import main

    for path, stacks in (
        (idefics3_repo / "onnx" / "vision_encoder.onnx", ["vision", "vision"]),
        (idefics3_repo, ["vision", "vision", "decoder", "decoder"]),
    ):
        assert main(["inspect", str(path), "--no-probe"]) == 0
        out = capsys.readouterr().out.splitlines()
        rows = out[out.index(next(line for line in out if line.startswith("attention sites"))) + 2 :]
        assert [r.split()[1] for r in rows[: len(stacks)]] == stacks
        assert any("vision: the vision tower's sites" in r for r in rows)
        assert main(["inspect", str(path), "--no-probe", "--json"]) == 0
        assert {s["stack"] for s in json.loads(capsys.readouterr().out)["sites"]} <= {"encoder", "decoder"}
    assert (
        main(["inspect", str(Path(__file__).resolve().parents[2] / "models" / "translation.onnx"), "--no-probe"]) == 0
    )
    assert "vision" not in capsys.readouterr().out  # a text encoder stays "encoder"


def test_the_split_is_kept_in_the_npz(tower, images, tmp_path):
    r = tower.analyze(image=str(images["tall"]))
    io.save_npz(r, tmp_path / "t.npz")
    back = io.load_npz(tmp_path / "t.npz")
    assert back.patch_grid == r.patch_grid and back.patch_grid.tile_layout == (2, 1)
    _, grid, _ = v.image_source(back, back.blocks(), attention="tower")
    assert (grid.rows, grid.cols) == (12, 6) and grid.global_grid is not None


def test_raw_pixel_values_run_and_the_view_says_the_tiles_are_not_laid_out(tower, idefics3_repo, images):
    """The processor's pixel values given raw (no Swin refusal): the same maps; the tiles' arrangement is not known
    from them, so the global image is drawn alone and the info line says why."""
    px = processed(idefics3_repo, images["square"])["pixel_values"]
    r = tower.analyze(feeds={"pixel_values": px})
    ref = tower.analyze(image=str(images["square"]))
    for got, want in zip(r.maps, ref.maps, strict=True):
        np.testing.assert_allclose(got.array(), want.array(), atol=1e-6)
    blk = r.blocks()[0]
    bi, grid, _ = v.image_source(r, r.blocks(), attention="tower")
    assert grid.lead_images == 4 and grid.tile_layout is None and grid.global_grid is None
    assert v.grid_note(r, blk, grid) == (
        "global image only: its 4 tiles at keys 0–143 of the tower not drawn, no decoder image tokens to lay them out"
    )


def test_a_rank_4_tensor_names_the_images_axis(tower):
    with pytest.raises(AttnvizError, match=re.escape("give pixel_values[:, None] for one image a row")) as e:
        tower.analyze(feeds={"pixel_values": np.zeros((1, 3, im.TILE, im.TILE), np.float32)})
    assert "\n" not in str(e.value) and "(1, 3, 48, 48)" in str(e.value)
    r = tower.analyze(feeds={"pixel_values": np.ones((1, 3, im.TILE, im.TILE), np.float32)[:, None]})
    assert r.maps[0].shape == (1, im.HEADS, 36, 36)  # as the fix says: one image a row


def test_no_processor_config_is_one_line(idefics3_repo, images, tmp_path):
    """config.json names the family and no preprocessor_config.json is there: --image names the file and the fix;
    raw pixel values still run."""
    (tmp_path / "onnx").mkdir()
    shutil.copy(idefics3_repo / "config.json", tmp_path / "config.json")
    shutil.copy(idefics3_repo / "onnx" / "vision_encoder.onnx", tmp_path / "onnx" / "vision_encoder.onnx")
    m = open_model(tmp_path / "onnx" / "vision_encoder.onnx", provider="cpu")
    assert m.frames is not None and m.frames.family is None
    with pytest.raises(AttnvizError, match="no preprocessor_config.json is beside it") as e:
        m.analyze(image=str(images["wide"]))
    assert "put the repository's preprocessor_config.json there" in str(e.value) and "\n" not in str(e.value)
    px = np.ones((1, 2, 3, im.TILE, im.TILE), np.float32)
    r = m.analyze(feeds={"pixel_values": px, "pixel_attention_mask": np.ones((1, 2, im.TILE, im.TILE), bool)})
    assert r.maps[0].shape == (1, im.HEADS, 72, 72)


def test_a_bare_file_names_the_config_files(idefics3_repo, images, tmp_path):
    """The file alone, no config files at all: --image names them; raw frames are not taken for Swin's windows."""
    shutil.copy(idefics3_repo / "onnx" / "vision_encoder.onnx", tmp_path / "vision_encoder.onnx")
    m = open_model(tmp_path / "vision_encoder.onnx", provider="cpu")
    assert m.frames is None
    with pytest.raises(AttnvizError, match="put the repository's config.json and preprocessor_config.json beside"):
        m.analyze(image=str(images["wide"]))
    px = np.ones((1, 3, 3, im.TILE, im.TILE), np.float32)
    r = m.analyze(feeds={"pixel_values": px, "pixel_attention_mask": np.ones((1, 3, im.TILE, im.TILE), bool)})
    assert r.maps[0].shape == (3, im.HEADS, 36, 36)  # a map row per frame, as the file gives them


def test_a_padded_batchs_rows_each_get_their_own_tower_grid(whole, tower, idefics3_repo, images, tmp_path):
    """Two rows of different splits (1 x 2 and 2 x 2 tiles: 3 and 5 frames, the first row's padded with zero
    frames): each row's tower view lays out its own tiles and its own global image, each cell placed by hand from
    that row's key labels; the padding's keys are no patch (row 0 drew them as its global image)."""
    pics = [Image.open(images["wide"]).convert("RGB"), Image.open(images["square"]).convert("RGB")]
    enc = im.processor(idefics3_repo)(
        text=["<image> a cat", "red <image> dog"], images=[[p] for p in pics], return_tensors="np", padding=True
    )
    r = whole.analyze(feeds={k: enc[k] for k in ("pixel_values", "input_ids", "attention_mask")})
    for b, (rows, cols) in enumerate([(1, 2), (2, 2)]):
        blocks = r.blocks(batch=b)
        bi, grid, _ = v.image_source(r, blocks, attention="tower")
        labels = list(blocks[bi].key_axis.labels)
        own = (rows * cols + 1) * 36
        assert blocks[bi].stack == "encoder" and (grid.rows, grid.cols) == (6 * rows, 6 * cols)
        assert all(lab.startswith("[") for lab in labels[own:]) and grid.global_grid.offset == own - 36
        q = blocks[bi].layer(1)[0][:own].mean(axis=0)
        np.testing.assert_array_equal(grid.to_image(q), tiles_by_hand(labels, q, rows, cols))
        np.testing.assert_array_equal(grid.global_grid.to_image(q), vb.on_grid(labels, q, r"\((\d+),(\d+)\)"))
        assert v.grid_note(r, blocks[bi], grid) == f"tiles in place, patches at keys 0–{own - 37} of the tower"
    io.save_npz(r, tmp_path / "two.npz")  # each row's grid kept
    back = io.load_npz(tmp_path / "two.npz")
    assert [back.patch_grid_of(b) for b in range(2)] == [r.patch_grid_of(b) for b in range(2)]
    assert r.patch_grid_of(0).lead_images == 2 and r.patch_grid_of(1).lead_images == 4
    # the tower alone on the same pixel values: each row's own frames, its tiles' layout unknown (raw values)
    t = tower.analyze(feeds={"pixel_values": enc["pixel_values"]})
    for b, tiles in enumerate([2, 4]):
        blocks = t.blocks(batch=b)
        _, grid, _ = v.image_source(t, blocks, attention="tower")
        assert (grid.lead_images, grid.offset) == (tiles, tiles * 36)
        assert v.grid_note(t, blocks[0], grid) == (
            f"global image only: its {tiles} tiles at keys 0–{tiles * 36 - 1} of the tower not drawn, no decoder "
            "image tokens to lay them out"
        )
