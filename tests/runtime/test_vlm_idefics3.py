"""Issue 22 items 1–2, Idefics3 / SmolVLM: the three-file layout opens as one model; the image goes through the
processor's resize / split into tiles + global image / rescale / normalise (pixel values as transformers'
Idefics3ImageProcessor's), the prompt's <image> becomes the processor's tile markers and image tokens (ids as
Idefics3Processor's); every decoder map equals transformers' eager attention of the whole
Idefics3ForConditionalGeneration, greedy tokens equal, and each image-token column lies on the tile and feature
cell torch puts there."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import idefics3_models as im  # noqa: E402
from PIL import Image  # noqa: E402

from attnviz import AttnvizError  # noqa: E402
from attnviz.runtime import builders as bd  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402
from attnviz.runtime.request import AnalyzeRequest  # noqa: E402
from attnviz.runtime.vlm import VLMSet  # noqa: E402
from attnviz.runtime.vlm_families import Idefics3, Tiles  # noqa: E402

PROMPT = "<s> <image> a photo of the cat"
TOL = 5e-4
SHAPES = {"wide": (40, 100), "tall": (90, 30), "square": (70, 64)}  # 1 x 2, 2 x 1, 2 x 2 tiles


def picture(h: int, w: int, seed: int = 3) -> Image.Image:
    return Image.fromarray((np.random.default_rng(seed).random((h, w, 3)) * 255).astype(np.uint8))


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("img")
    out = {}
    for name, hw in SHAPES.items():
        picture(*hw).save(d / f"{name}.png")
        out[name] = d / f"{name}.png"
    return out


@pytest.fixture(scope="module")
def torch_model():
    return im.build()


@pytest.fixture(scope="module")
def model(idefics3_repo):
    return open_model(idefics3_repo, provider="cpu")


def reference_inputs(repo, text, image_paths):
    imgs = [Image.open(p).convert("RGB") for p in image_paths]
    texts = [text] if isinstance(text, str) else text
    return im.processor(repo)(text=texts, images=[[i] for i in imgs], return_tensors="np", padding=True)


def test_opens_as_one_model(model):
    assert isinstance(model, VLMSet) and model.kind == "vision-decoder" and isinstance(model.family, Idefics3)
    assert [i.name for i in model.inputs] == ["pixel_values", "input_ids", "attention_mask"]
    assert model.inputs[0].shape == ["batch", "images", 3, im.TILE, im.TILE]
    assert [(s.stack, s.layer) for s in model.sites] == [("encoder", 0), ("encoder", 1), ("decoder", 0), ("decoder", 1)]
    assert model.describe()["image_tokens"]["grid"] == [im.SIDE, im.SIDE]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_pixels_and_prompt_as_the_processor_makes_them(model, idefics3_repo, images, shape):
    prep = bd.prepare(model, AnalyzeRequest(text=PROMPT, image=str(images[shape])))
    want = reference_inputs(idefics3_repo, PROMPT, [images[shape]])
    assert prep.feeds["pixel_values"].shape == want["pixel_values"].shape
    assert np.abs(prep.feeds["pixel_values"] - want["pixel_values"]).max() < 1e-4
    assert prep.prompts == [want["input_ids"][0].tolist()]


@pytest.mark.parametrize("hw", [(30, 50), (100, 20), (48, 48)])
def test_unsplit_images_as_the_processor_makes_them(idefics3_repo, hw):
    """do_image_splitting off: the image resized to one tile (the family's processor alone, no export needed)."""
    import json

    pre = json.loads((idefics3_repo / "preprocessor_config.json").read_text()) | {"do_image_splitting": False}
    cfg = json.loads((idefics3_repo / "config.json").read_text())
    fam = Idefics3(cfg, pre, {}, "test")
    img = picture(*hw, seed=7)
    frames, shown, tiles = fam.process(img)
    want = im.image_processor(split=False)(images=[[img]], return_tensors="np", return_row_col_info=True)
    assert tiles == Tiles() and want["rows"] == [[0]] and shown.shape == (im.TILE, im.TILE, 3)
    path = idefics3_repo.parent / f"unsplit-{hw[0]}x{hw[1]}.png"
    img.save(path)
    got = fam.load_image(path, None)
    assert np.abs(got.pixels - want["pixel_values"]).max() < 1e-4
    assert fam.expansion(Tiles()).count("<image>") == im.N_TILE


def test_every_map_equals_transformers_eager(model, idefics3_repo, images, torch_model):
    r = model.analyze(text=PROMPT, image=str(images["square"]))
    enc = reference_inputs(idefics3_repo, PROMPT, [images["square"]])
    vision, decoder, logits = im.reference(torch_model, enc)
    n, p = len(vision[0]), vision[0].shape[-1]  # 5 images (4 tiles + global), their patches each
    for got, want in zip(r.maps[:2], vision):  # the vision block: each image's patches among themselves
        a = got.array()
        assert a.shape == (1, im.HEADS, n * p, n * p)
        for t in range(n):
            assert np.abs(a[0, :, t * p : (t + 1) * p, t * p : (t + 1) * p] - want[t]).max() < TOL
        assert a.sum(-1) == pytest.approx(1.0, abs=1e-5)  # no weight off the diagonal blocks
    diffs = [float(np.abs(got.array() - want).max()) for got, want in zip(r.maps[2:], decoder)]
    assert len(diffs) == im.LAYERS and max(diffs) < TOL, diffs
    assert np.abs(r.outputs["logits"] - logits).max() < TOL


def test_raw_feeds_batch_of_two(model, idefics3_repo, images, torch_model):
    """Two rows with different splits (2 and 4 tiles): the processor pads the shorter row's images with zeros and
    its ids on the right; every map of both rows as transformers'."""
    enc = reference_inputs(idefics3_repo, ["<image> a cat", "red <image> dog"], [images["wide"], images["square"]])
    feeds = {k: enc[k] for k in ("pixel_values", "input_ids", "attention_mask")}
    r = model.analyze(feeds=feeds)
    _, decoder, _ = im.reference(torch_model, enc)
    # each row's image on its own grid: 1 x 2 tiles, then 2 x 2 (each with its global image)
    grids = [r.token_grid_of(b) for b in range(2)]
    assert [(g.rows, g.cols) for g in grids] == [(im.SIDE, 2 * im.SIDE), (2 * im.SIDE, 2 * im.SIDE)]
    for b, g in enumerate(grids):
        runs = [k for k in range(enc["input_ids"].shape[1]) if enc["input_ids"][b, k] == im.IMAGE_TOKEN]
        assert sorted([*g.columns, *range(g.global_grid.offset, g.global_grid.offset + im.N_TILE)]) == runs
    for got, want in zip(r.maps[2:], decoder):
        real = enc["attention_mask"].astype(bool)
        for b in range(2):  # the rows' real tokens (a padded query row is no one's attention)
            g, w = got.array()[b][:, real[b]][:, :, real[b]], want[b][:, real[b]][:, :, real[b]]
            assert np.abs(g - w).max() < TOL


@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_equals_transformers_greedy(model, idefics3_repo, images, torch_model, use_cache):
    r = model.analyze(text=PROMPT, image=str(images["wide"]), generate=4, use_cache=use_cache)
    enc = reference_inputs(idefics3_repo, PROMPT, [images["wide"]])
    with torch.no_grad():
        out = torch_model.generate(
            **{k: torch.as_tensor(v) for k, v in enc.items()}, max_new_tokens=4, do_sample=False, eos_token_id=None
        )
    n = enc["input_ids"].shape[1]
    assert r.info["generated_ids"] == out[0, n:].tolist()
    full = dict(enc, input_ids=out[:, :-1].numpy(), attention_mask=np.ones((1, out.shape[1] - 1), np.int64))
    _, decoder, _ = im.reference(torch_model, full)
    for got, want in zip(r.maps[2:], decoder):
        assert got.shape == want.shape and np.abs(got.array() - want).max() < TOL


def test_each_key_column_lies_on_the_tile_and_cell_torch_puts_there(model, idefics3_repo, torch_model, tmp_path):
    """Hand-built: an image 2 tiles high and 2 wide, black but for one bright s×s block of patches; the processor
    cuts it, torch's patch embedding and pixel shuffle change exactly one feature of one tile, and that feature's
    key column is the grid cell under the bright block (and is labelled with its tile and cell)."""
    big = 2 * im.TILE
    cell_px = im.PATCH * im.SCALE  # one feature covers an s x s block of patches
    conv = torch_model.model.vision_model.embeddings.patch_embedding
    shuffle = torch_model.model.connector.pixel_shuffle
    for y, x in [(0, 0), (1, 4), (5, 2), (4, 5), (3, 3)]:  # feature cells of the 6 x 6 tiled grid
        a = np.zeros((big, big, 3), np.uint8)
        a[y * cell_px : (y + 1) * cell_px, x * cell_px : (x + 1) * cell_px] = 255
        path = tmp_path / f"block-{y}-{x}.png"
        Image.fromarray(a).save(path)
        r = model.analyze(text=PROMPT, image=str(path))
        g = r.token_grid
        assert (g.rows, g.cols) == (2 * im.SIDE, 2 * im.SIDE)
        enc = reference_inputs(idefics3_repo, PROMPT, [path])
        px = torch.as_tensor(enc["pixel_values"][0, :4])  # the 4 tiles (the global image last)
        with torch.no_grad():  # as the tower's embeddings, then the connector's shuffle of the patch grid

            def features(x):
                return shuffle(conv(x).flatten(2).transpose(1, 2).contiguous(), im.SCALE)

            diff = features(px) - features(torch.full_like(px, float(px.min())))  # against all black
        changed = torch.nonzero(diff.abs().sum(-1) > 1e-6)
        assert changed.shape[0] == 1
        tile, feature = (int(v) for v in changed[0])
        ids = enc["input_ids"][0]
        runs = [k for k in range(len(ids)) if ids[k] == im.IMAGE_TOKEN and ids[k - 1] != im.IMAGE_TOKEN]
        key = runs[tile] + feature  # the processor's layout: tile runs in reading order, features row-major
        assert g.key(y, x) == key and g.cell(key) == (y, x)
        fr, fc = divmod(feature, im.SIDE)
        assert r.blocks()[-1].key_axis.labels[key] == f"tile {tile}·({fr},{fc})"


def test_each_global_key_column_lies_on_the_cell_torch_puts_there(model, idefics3_repo, torch_model, tmp_path):
    """Hand-built: an image 2 tiles high and 2 wide, black but for one bright block the size of one global-image
    feature; the processor resizes the whole image to one tile (the global image, the last frame), and the feature
    torch's patch embedding and pixel shuffle change most there is the key column of the global grid's cell under
    the block (labelled ``(r,c)``, as the tower names its patch)."""
    big = 2 * im.TILE
    block = 2 * im.PATCH * im.SCALE  # a global feature's s x s patches, in the image twice the tile's size
    conv = torch_model.model.vision_model.embeddings.patch_embedding
    shuffle = torch_model.model.connector.pixel_shuffle
    for y, x in [(0, 0), (0, 2), (1, 1), (2, 0), (2, 1)]:  # cells of the 3 x 3 global grid
        a = np.zeros((big, big, 3), np.uint8)
        a[y * block : (y + 1) * block, x * block : (x + 1) * block] = 255
        path = tmp_path / f"global-{y}-{x}.png"
        Image.fromarray(a).save(path)
        r = model.analyze(text=PROMPT, image=str(path))
        whole = r.token_grid.global_grid
        assert whole is not None and (whole.rows, whole.cols) == (im.SIDE, im.SIDE)
        enc = reference_inputs(idefics3_repo, PROMPT, [path])
        px = torch.as_tensor(enc["pixel_values"][0, 4:5])  # the global image (after the 4 tiles)
        with torch.no_grad():
            feats = shuffle(conv(px).flatten(2).transpose(1, 2).contiguous(), im.SCALE)
            black = shuffle(conv(torch.full_like(px, -1.0)).flatten(2).transpose(1, 2).contiguous(), im.SCALE)
        feature = int((feats - black).abs().sum(-1)[0].argmax())
        ids = enc["input_ids"][0]
        runs = [k for k in range(len(ids)) if ids[k] == im.IMAGE_TOKEN and ids[k - 1] != im.IMAGE_TOKEN]
        key = runs[-1] + feature  # the processor's layout: the global image's run last, features row-major
        assert divmod(feature, im.SIDE) == (y, x)  # the block's cell (the resize keeps it where it was)
        assert whole.key(y, x) == key and whole.cell(key) == (y, x) and r.token_grid.cell(key) is None
        assert r.blocks()[-1].key_axis.labels[key] == f"({y},{x})"


def test_image_regions_show_a_word_over_the_tiles(model, images, torch_model, idefics3_repo, tmp_path):
    """A word's decoder row over the image tokens, tiles in place: the overlay's patch map is transformers' row,
    each tile's features at its place; the tiled grid survives the .npz."""
    from attnviz.core import io
    from attnviz.core import view as v

    r = model.analyze(text=PROMPT, image=str(images["wide"]))  # 1 x 2 tiles
    blocks = r.blocks()
    dec = next(i for i, b in enumerate(blocks) if b.stack == "decoder")
    assert v.image_source(r, blocks)[:2] == (dec, r.token_grid)
    queries = v.image_queries(r, blocks[dec], r.token_grid)
    # the global image's tokens are not words; each row named by the word it produced (words24)
    assert [w for w, _ in queries] == "photo of the cat (next)".split()
    enc = reference_inputs(idefics3_repo, PROMPT, [images["wide"]])
    _, decoder, _ = im.reference(torch_model, enc)
    ids = enc["input_ids"][0]
    runs = [k for k in range(len(ids)) if ids[k] == im.IMAGE_TOKEN and ids[k - 1] != im.IMAGE_TOKEN]
    row = dict(queries)["cat"]
    for layer, head in ((0, 1), (1, 3)):
        # (stretched to the map: the top of both panels' drawn weights below)
        ov = v.overlay_view(r, v.Selection(block=dec, layer=layer, head=head, query=row, scale="map"))
        want = decoder[layer][0, head, row]
        left = want[runs[0] : runs[0] + im.N_TILE].reshape(im.SIDE, im.SIDE)
        right = want[runs[1] : runs[1] + im.N_TILE].reshape(im.SIDE, im.SIDE)
        assert np.abs(ov.patch - np.concatenate([left, right], axis=1)).max() < TOL
        # the global image (the last run) beside the tiles, on the same scale; each panel's share of the row
        glob = ov.global_panel
        assert glob is not None and (glob.grid.rows, glob.grid.cols) == (im.SIDE, im.SIDE)
        assert np.abs(glob.patch - want[runs[2] : runs[2] + im.N_TILE].reshape(im.SIDE, im.SIDE)).max() < TOL
        assert glob.share == pytest.approx(float(want[runs[2] : runs[2] + im.N_TILE].sum()), abs=TOL)
        assert ov.share == pytest.approx(float(left.sum() + right.sum()), abs=TOL)
        top = max(v.upsample(p, (8 * im.SIDE, 8 * p.shape[1])).max() for p in (ov.patch, glob.patch))
        assert ov.vmax == pytest.approx(float(top), rel=1e-5)
        assert ov.captions == (f"tiles · {ov.share:.0%} of the row", f"global image · {glob.share:.0%} of the row")
    assert r.image.shape[:2] == (im.TILE, 2 * im.TILE)  # the resized image the two tiles cover
    assert r.info["image_preprocessing"].startswith(f"Idefics3 processor: {im.TILE}x{2 * im.TILE}, 1x2 tiles")
    # the vision block: each image's patches (the tiles', then the global image's, which lie on the image)
    p = (im.TILE // im.PATCH) ** 2
    vision = blocks[0].key_axis.labels
    assert (
        len(vision) == 3 * p
        and vision[0] == "tile 0·(0,0)"
        and vision[p + 1] == "tile 1·(0,1)"
        and vision[2 * p] == "(0,0)"
    )
    assert r.patch_grid.offset == 2 * p
    io.save_npz(r, tmp_path / "r.npz")
    assert io.load_npz(tmp_path / "r.npz").token_grid == r.token_grid


def test_two_placeholders_are_one_line(model, images):
    with pytest.raises(
        AttnvizError, match="holds 2 <image> placeholders and 1 image was given; write <image> once per"
    ):
        model.analyze(text="<image> a <image> cat", image=str(images["wide"]))
    with pytest.raises(AttnvizError, match="write <image> once"):
        model.analyze(text="a photo of the cat", image=str(images["wide"]))


def test_the_image_figure_draws_the_tiled_grid(model, images):
    """The figure's image view opens on the decoder's words over the tiles (the screen's view model) and draws."""
    from attnviz.core import view as v
    from attnviz.figures import FigureSpec, figure_bytes, render_spec, select

    r = model.analyze(text=PROMPT, image=str(images["tall"]))  # 2 x 1 tiles
    assert (r.token_grid.rows, r.token_grid.cols) == (2 * im.SIDE, im.SIDE)
    dec = v.image_source(r, r.blocks())[0]
    assert select.WHY_NOT["image"](r) is None and select._image_block(r, None) == dec
    png = figure_bytes(
        render_spec(
            r, FigureSpec(view="image", query=int(v.image_queries(r, r.blocks()[dec], r.token_grid)[-1][1]), dpi=40)
        ),
        "png",
    )
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_several_heads_of_a_tiled_image_side_by_side_on_the_shared_scale(model, images, idefics3_repo):
    """`figure --view image --head 0,2 --scale shared` of a tiled image: each head's tiles and global image side by
    side, captioned with the head and each panel's share of the row, under one colour bar whose top is the largest
    weight any head of any layer gives the image's tokens (tiles and global image) from the word's row, by numpy."""
    from attnviz.core import view as v
    from attnviz.figures import FigureSpec, render_spec

    r = model.analyze(text=PROMPT, image=str(images["wide"]))
    dec = v.image_source(r, r.blocks())[0]
    blk = r.blocks()[dec]
    row = dict(v.image_queries(r, blk, r.token_grid))["cat"]
    # the image's tokens: the three runs of image tokens in the prompt (two tiles, then the global image)
    ids = reference_inputs(idefics3_repo, PROMPT, [images["wide"]])["input_ids"][0]
    image_keys = [k for k in range(len(ids)) if ids[k] == im.IMAGE_TOKEN]
    assert len(image_keys) == 3 * im.N_TILE
    top = max(float(r.maps[i].array()[0, h, row, image_keys].max()) for i in blk.sites for h in range(blk.heads_in(0)))
    fig = render_spec(r, FigureSpec(view="image", layer=1, heads=[0, 2], query=row, image_scale="shared", dpi=40))
    pictures = [a for a in fig.axes if len(a.images) == 2]
    assert [a.get_title().replace("\n", " · ").split(" · ")[:2] for a in pictures] == [
        ["head 0", "tiles"],
        ["head 0", "global image"],
        ["head 2", "tiles"],
        ["head 2", "global image"],
    ]
    assert fig.axes[-1].get_ylim()[1] == pytest.approx(top, rel=1e-5)


def test_the_vision_block_over_the_image_is_every_tile_beside_the_global_image(model, images):
    """The vision block's Image regions: each tile's patches (a tower run each) where the tile lies on the picture,
    the global image's patches (the last run, the whole picture) on a grid of their own beside them, as the words'
    view lays the image's tokens out; no tile patch is offered as if it were a CLS query."""
    from attnviz.core import view as v

    r = model.analyze(text=PROMPT, image=str(images["wide"]))  # 1 x 2 tiles
    blocks = r.blocks()
    bi, grid, kind = v.image_source(r, blocks, prefer=0)
    side = r.token_grid.global_grid.rows * (grid.rows // r.token_grid.rows)  # a tile's patches a side (6)
    assert (bi, kind) == (0, "self") and (grid.rows, grid.cols) == (side, 2 * side) == (6, 12)
    keys = list(blocks[0].key_axis.labels)  # the tower's own labels: tile t's patch tile t·(r,c), the global's (r,c)
    assert [keys[grid.key(R, C)] for R in range(6) for C in range(12)] == [
        f"tile {C // 6}·({R},{C % 6})" for R in range(6) for C in range(12)
    ]
    whole = grid.global_grid
    assert [keys[whole.key(R, C)] for R in range(6) for C in range(6)] == [
        f"({R},{C})" for R in range(6) for C in range(6)
    ]
    assert v.image_queries(r, blocks[0], grid) == [("all patches (mean)", -1)]
