"""Image regions' two attentions over one image (the view model's ``image_from``): the words' (a vision–language
decoder's word over the image's tokens) or the vision tower's own (patch to patch), per image of a prompt that held
two, against rows of the maps placed on the patch grid by hand from the keys' labels (``img2(r,c)``)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from attnviz.core import view as vm
from attnviz.core.attention import (
    IMAGE_GRIDS_KEY,
    VISION_GRIDS_KEY,
    AttentionResult,
    DenseMap,
    PatchGrid,
    SiteInfo,
    TokenAxis,
)

# the vision tower's keys: image 1's 2 x 3 patches in the tower's own (2 x 2 merge) order, then image 2's 3 x 2
TOWER_1 = [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (1, 2)]
TOWER_2 = [(r, c) for r in range(3) for c in range(2)]
DECODER = ["a", "img1(0,0)", "img1(0,1)", "b", "img2(0,0)", "img2(1,0)", "where", "cat"]  # named as the tower's


def _soft(rng, *shape):
    m = rng.random((1, *shape)).astype(np.float32) ** 4  # peaky rows: a wrong cell shows
    return m / m.sum(-1, keepdims=True)


def _vlm() -> AttentionResult:
    """A two-image prompt as a vision–language run leaves it: the tower's two layers over both images' 12 patches
    (each image's on the diagonal), the decoder's two layers over 8 tokens (image 1's 1 x 2, image 2's 2 x 1)."""
    rng = np.random.default_rng(5)
    tower = np.zeros((1, 3, 12, 12), np.float32)
    maps = []
    for _ in range(2):
        t = tower.copy()
        t[:, :, :6, :6] = _soft(rng, 3, 6, 6)
        t[:, :, 6:, 6:] = _soft(rng, 3, 6, 6)
        maps.append(DenseMap(t))
    maps += [DenseMap(_soft(rng, 3, 8, 8)) for _ in range(2)]
    sites = [SiteInfo("encoder", "self", k, 3, f"v{k}", "softmax") for k in range(2)]
    sites += [SiteInfo("decoder", "self", k, 3, f"d{k}", "softmax") for k in range(2)]
    first = PatchGrid(2, 3, 0, tuple(TOWER_1.index((r, c)) for r in range(2) for c in range(3)), 6)
    vision = [first, PatchGrid(3, 2).shifted(6)]
    tokens = [PatchGrid(1, 2, 1), PatchGrid(2, 1, 4)]
    labels = [f"img1({r},{c})" for r, c in TOWER_1] + [f"img2({r},{c})" for r, c in TOWER_2]
    images = [np.full((20, 30, 3), 90, np.uint8), np.full((30, 20, 3), 160, np.uint8)]
    return AttentionResult(
        maps,
        sites,
        tokens=TokenAxis(labels),
        key_tokens=TokenAxis(DECODER),
        patch_grid=vision[0],
        token_grid=tokens[0],
        image=images[0],
        images=images,
        info={IMAGE_GRIDS_KEY: [g.to_dict() for g in tokens], VISION_GRIDS_KEY: [g.to_dict() for g in vision]},
    )


def placed(labels: list[str], row: np.ndarray, pattern: str) -> np.ndarray:
    """``row``'s weights at the cells their keys' labels name (``pattern`` matches a label, groups row and col)."""
    cells = {(int(m[1]), int(m[2])): float(row[k]) for k, lab in enumerate(labels) if (m := re.fullmatch(pattern, lab))}
    out = np.full((1 + max(r for r, _ in cells), 1 + max(c for _, c in cells)), np.nan, np.float32)
    for (r, c), v in cells.items():
        out[r, c] = v
    assert not np.isnan(out).any()
    return out


def test_a_vision_language_result_offers_the_words_and_the_tower_and_a_vit_only_one():
    r = _vlm()
    assert [f.name for f in vm.image_attentions(r, r.blocks())] == ["words", "tower"]
    assert vm.image_source(r, r.blocks())[0] == 1  # the decoder's words, as before there was a choice
    assert vm.image_source(r, r.blocks(), None, "tower")[0] == 0
    # a ViT: its encoder is the words' fallback and the tower both, one block: nothing to choose
    cls = _soft(np.random.default_rng(1), 2, 5, 5)
    vit = AttentionResult(
        [DenseMap(cls)], [SiteInfo("encoder", "self", 0, 2, "e", "softmax")], tokens=TokenAxis(["CLS", *"abcd"])
    )
    vit.patch_grid = PatchGrid(2, 2, 1)
    assert len(vm.image_attentions(vit, vit.blocks())) == 1
    for name in vm.IMAGE_FROM:  # the [CLS] row over the 2 x 2 patches, whichever is asked for
        ov = vm.overlay_view(vit, vm.Selection(mode="head", head=1, image_from=name))
        np.testing.assert_array_equal(ov.patch, cls[0, 1, 0, 1:].reshape(2, 2))
        assert ov.query_label == "CLS"


@pytest.mark.parametrize("picture", [0, 1])
def test_the_towers_rows_over_each_image_are_its_patches_rows_placed_on_its_grid(picture):
    r = _vlm()
    tower = [f"img{picture + 1}({r_},{c})" for r_, c in (TOWER_1, TOWER_2)[picture]]
    labels = list(r.tokens.labels)
    pattern = rf"img{picture + 1}\((\d+),(\d+)\)"
    mine = [k for k, lab in enumerate(labels) if lab in tower]
    layer1 = r.maps[1].array()[0]
    # the decoder's block selected (another tab's) does not win over the tower asked for
    sel = vm.Selection(block=1, mode="head", layer=1, head=2, picture=picture, image_from="tower")
    ov = vm.overlay_view(r, sel)
    assert ov.block_index == 0 and (ov.grid.rows, ov.grid.cols) == [(2, 3), (3, 2)][picture]
    # no CLS in this tower: the mean of this image's patches' rows, the attention each of its patches receives
    assert ov.query_label == "all patches (mean)"
    np.testing.assert_allclose(ov.patch, placed(labels, layer1[2, mine].mean(axis=0), pattern), rtol=1e-6)
    assert ov.heat.shape == r.images[picture].shape[:2]  # over this image
    # a patch as the query: its row, and its cell outlined
    key = labels.index(f"img{picture + 1}(1,1)")
    ov = vm.overlay_view(r, sel.with_(query=key))
    np.testing.assert_allclose(ov.patch, placed(labels, layer1[2, key], pattern), rtol=1e-6)
    assert ov.query_label == "patch (1, 1)" and ov.query_cell == (1, 1)
    # the mean over heads of layers 0-1, as elsewhere
    mean = np.concatenate([r.maps[k].array()[0] for k in (0, 1)]).mean(axis=0)
    ov = vm.overlay_view(r, sel.with_(query=key, mode="mean", layer_lo=0, layer_hi=1))
    np.testing.assert_allclose(ov.patch, placed(labels, mean[key], pattern), rtol=1e-5)
    assert "vision self-attention" in ov.title and f"image {picture + 1} of 2" in ov.title


def test_the_words_rows_are_drawn_by_default_and_the_choice_is_checked():
    r = _vlm()
    ov = vm.overlay_view(r, vm.Selection(block=0, mode="head", layer=0, head=1, picture=1, query=6))
    assert ov.block_index == 0  # a selected tower block is drawn, as `figure --block 0` asks
    ov = vm.overlay_view(r, vm.Selection(block=1, mode="head", layer=0, head=1, picture=1, query=6))
    assert ov.block_index == 1 and ov.query_label == "cat"  # row 6 reads "where" and produced "cat" (words24)
    np.testing.assert_allclose(ov.patch, placed(DECODER, r.maps[2].array()[0, 1, 6], r"img2\((\d+),(\d+)\)"), rtol=1e-6)
    with pytest.raises(vm.ViewError) as e:
        vm.overlay_view(r, vm.Selection(image_from="pixels"))
    assert str(e.value) == "unknown image attention 'pixels'; use one of words, tower, pooling"


def test_a_captioner_without_a_tower_over_the_patches_draws_the_words():
    """The tower asked of a result that has none over the image: the words' attention (the chooser offers one)."""
    rng = np.random.default_rng(2)
    cross = _soft(rng, 2, 3, 4)
    r = AttentionResult(
        [DenseMap(_soft(rng, 2, 3, 3)), DenseMap(cross)],
        [SiteInfo("decoder", "self", 0, 2, "d", "softmax"), SiteInfo("decoder", "cross", 0, 2, "c", "softmax")],
        key_tokens=TokenAxis(["<s>", "a", "dog"]),
        patch_grid=PatchGrid(2, 2),
        image=np.zeros((8, 8, 3), np.uint8),
        prompt_len=3,
    )
    assert [f.name for f in vm.image_attentions(r, r.blocks())] == ["words"]
    ov = vm.overlay_view(r, vm.Selection(block=1, mode="head", head=0, image_from="tower", query=1))
    assert r.blocks()[ov.block_index].kind == "cross"
    np.testing.assert_array_equal(ov.patch, cross[0, 0, 1].reshape(2, 2))


@pytest.mark.parametrize("picture", [0, 1])
def test_a_block_picked_is_the_attention_drawn_over_the_image(picture):
    """The sidebar's block and the chooser are one choice: the tower's block draws the tower (its rows placed by
    hand), the decoder's the words; a block over no image keeps what was drawn."""
    r = _vlm()
    blocks = r.blocks()
    for current in vm.IMAGE_FROM:
        sel = vm.Selection(block=0, mode="head", layer=1, head=2, picture=picture, image_from=current)
        tower = vm.follow_block(r, blocks, sel)
        assert tower.image_from == "tower" and tower.with_(image_from=current) == sel  # nothing else moves
        ov = vm.overlay_view(r, tower)
        labels = list(r.tokens.labels)
        pattern = rf"img{picture + 1}\((\d+),(\d+)\)"
        mine = [k for k, lab in enumerate(labels) if re.fullmatch(pattern, lab)]
        np.testing.assert_allclose(ov.patch, placed(labels, r.maps[1].array()[0, 2, mine].mean(0), pattern), rtol=1e-6)
        words = vm.follow_block(r, blocks, sel.with_(block=1, query=6))
        assert words.image_from == "words"
        ov = vm.overlay_view(r, words)
        assert ov.block_index == 1 and ov.query_label == "cat"  # row 6 reads "where" and produced "cat" (words24)
        want = r.maps[3].array()[0, 2, 6]
        np.testing.assert_allclose(ov.patch, placed(DECODER, want, rf"img{picture + 1}\((\d+),(\d+)\)"), rtol=1e-6)
    # a ViT's one encoder is its tower (its one entry, the words' fallback too): picking it names the tower
    vit = AttentionResult(
        [DenseMap(_soft(np.random.default_rng(1), 2, 5, 5))],
        [SiteInfo("encoder", "self", 0, 2, "e", "softmax")],
        tokens=TokenAxis(["CLS", *"abcd"]),
    )
    vit.patch_grid = PatchGrid(2, 2, 1)
    assert [f.name for f in vm.image_attentions(vit, vit.blocks())] == ["tower"]
    assert vm.follow_block(vit, vit.blocks(), vm.Selection()).image_from == "tower"
    # a block out of range, or a result without an image: the choice stays
    assert vm.block_image_from(r, blocks, 7, "tower") == "tower"


def test_a_figure_of_a_block_names_the_attention_it_draws():
    from attnviz.figures import FigureSpec
    from attnviz.figures.select import resolve

    r = _vlm()
    assert resolve(r, FigureSpec(view="image", block=0)).image_from == "tower"
    assert resolve(r, FigureSpec(view="image", block=1)).image_from == "words"
    assert resolve(r, FigureSpec(view="image")).image_from == "words"  # the default opens on the words
    assert resolve(r, FigureSpec(view="image", image_from="tower")).block == 0
    assert resolve(r, FigureSpec(view="heatmap", block=0)).image_from == "words"  # other views: as they were


def _tiled() -> AttentionResult:
    """An Idefics3-like run: the tower over a 1 x 2 tiled image's two tiles (2 x 2 patches each, ``t0(r,c)``,
    ``t1(r,c)``) and its global image (``(r,c)``), each its own tower run (its rows on the diagonal); the decoder's
    tokens: each tile one feature (``t0[0,0]``, ``t1[0,0]``) side by side, the global image's one beside them."""
    rng = np.random.default_rng(9)
    tower = np.zeros((1, 2, 12, 12), np.float32)
    for k in range(3):
        tower[:, :, 4 * k : 4 * k + 4, 4 * k : 4 * k + 4] = _soft(rng, 2, 4, 4)
    labels = [f"t{t}({r},{c})" for t in range(2) for r in range(2) for c in range(2)]
    labels += [f"({r},{c})" for r in range(2) for c in range(2)]
    words = ["<s>", "t0[0,0]", "t1[0,0]", "g[0,0]", "what"]
    tiles = PatchGrid(1, 2, 1, (1, 2), 4, global_grid=PatchGrid(1, 1, 3))
    return AttentionResult(
        [DenseMap(tower), DenseMap(_soft(rng, 2, 5, 5))],
        [SiteInfo("encoder", "self", 0, 2, "v", "softmax"), SiteInfo("decoder", "self", 0, 2, "d", "softmax")],
        tokens=TokenAxis(labels),
        key_tokens=TokenAxis(words),
        patch_grid=PatchGrid(2, 2, 8, lead_images=2),
        token_grid=tiles,
        image=np.full((16, 32, 3), 90, np.uint8),
    )


def test_a_tiled_images_tower_draws_every_tile_beside_the_global_image():
    """The tower over each tile, not only the global image: tile t's patch (r, c) at cell (r, 2t + c) of the tiles'
    picture (placed from the keys' labels), the global image's patches beside them, as the words' view lays out."""
    r = _tiled()
    labels = list(r.tokens.labels)
    tower = r.maps[0].array()[0, 1]

    def tiles_of(row: np.ndarray) -> np.ndarray:
        return placed(
            [re.sub(r"^t(\d)\((\d),(\d)\)$", lambda m: f"T({m[2]},{2 * int(m[1]) + int(m[3])})", x) for x in labels],
            row,
            r"T\((\d+),(\d+)\)",
        )

    sel = vm.Selection(mode="head", head=1, image_from="tower")
    ov = vm.overlay_view(r, sel)
    assert ov.block_index == 0 and (ov.grid.rows, ov.grid.cols) == (2, 4)
    assert ov.query_label == "all patches (mean)"  # every tile's and the global image's rows
    mean = tower.mean(axis=0)
    np.testing.assert_allclose(ov.patch, tiles_of(mean), rtol=1e-6)
    np.testing.assert_allclose(ov.global_panel.patch, placed(labels, mean, r"\((\d+),(\d+)\)"), rtol=1e-6)
    # a patch of tile 1 as the query: its row over its own tile, nothing on tile 0 or the global image
    key = labels.index("t1(1,0)")
    ov = vm.overlay_view(r, sel.with_(query=key))
    np.testing.assert_allclose(ov.patch, tiles_of(tower[key]), rtol=1e-6)
    # named by its tile and its cell in that tile, as its key is (t1(1,0)), not by its cell (1, 2) of the tiled picture
    assert ov.query_label == "tile 1 patch (1, 0)" and ov.query_cell == (1, 2) and ov.global_panel.share == 0
    assert vm.is_patch_label(ov.query_label) and "query “tile 1 patch (1, 0)”" in ov.title  # the figure's title
    # the global image's patch: its row beside the tiles
    key = labels.index("(0,1)")
    ov = vm.overlay_view(r, sel.with_(query=key))
    np.testing.assert_allclose(ov.global_panel.patch, placed(labels, tower[key], r"\((\d+),(\d+)\)"), rtol=1e-6)
    assert ov.query_label == "global image patch (0, 1)" and ov.global_panel.query_cell == (0, 1)
    assert not ov.patch.any()
    # the info line's note: the tiles laid out in place, each tile's and the global image's keys of the tower
    assert vm.grid_note(r, r.blocks()[0], ov.grid) == "tiles in place, patches at keys 0–7 of the tower"


def test_a_tiled_images_patches_are_named_by_tile_as_their_keys_are():
    """Each cell of a tiled grid named as its key's label names it (tile ``k`` in reading order, its cell in that
    tile): the tower's ``t{k}(r,c)`` keys and the decoder's ``t{k}[r,c]`` tokens, labels written by hand here."""
    r = _tiled()
    tower = vm.block_grid(r, r.blocks()[0])
    for key, lab in enumerate(r.tokens.labels[:8]):
        t, rr, cc = map(int, re.fullmatch(r"t(\d)\((\d),(\d)\)", lab).groups())
        assert vm.patch_label(tower, key) == f"tile {t} patch ({rr}, {cc})"
    words = r.token_grid
    assert [vm.patch_label(words, k) for k in (1, 2)] == ["tile 0 patch (0, 0)", "tile 1 patch (0, 0)"]
    # a grid without tiles keeps its plain names
    assert vm.patch_label(PatchGrid(2, 3, 1), 6) == "patch (1, 2)"
    assert vm.is_patch_label("global image patch (1, 2)") and not vm.is_patch_label("all patches (mean)")


def _named(label: str) -> str:
    """A tower key's label (``t1(0,1)``, the global image's ``(0,1)``) as the view names that patch, written here."""
    m = re.fullmatch(r"t(\d+)\((\d+),(\d+)\)", label)
    if m:
        return f"tile {m[1]} patch ({m[2]}, {m[3]})"
    m = re.fullmatch(r"\((\d+),(\d+)\)", label)
    return f"global image patch ({m[1]}, {m[2]})"


def _top(labels: list[str], row: np.ndarray, pattern: str) -> str:
    """The label of the key with the largest weight among those whose labels match ``pattern``."""
    keys = [k for k, lab in enumerate(labels) if re.fullmatch(pattern, lab)]
    return labels[max(keys, key=lambda k: row[k])]


def test_the_global_images_patches_and_peak_are_named_as_the_global_image():
    """The global image beside the tiles names its patches "global image patch (r, c)", as a tile's are "tile k patch
    (r, c)": a click on it, a key of it, and the info line's peak (the view model's words, the window's and the
    figure's), each against the key's label read by hand."""
    r = _tiled()
    labels = list(r.tokens.labels)
    tower = r.maps[0].array()[0, 1]
    grid = vm.block_grid(r, r.blocks()[0])
    for key in range(8, 12):  # the global image's keys, (r,c)
        assert vm.patch_label(grid, key) == _named(labels[key])
    # a click on the global image, 16 x 32 pixels beside the tiles: its 2 x 2 cells, (1, 0) at the bottom left
    label, row = vm.patch_query(grid, 3.0, 12.0, 32, 16, on_global=True)
    assert (label, labels[row]) == ("global image patch (1, 0)", "(1,0)")
    label, row = vm.patch_query(grid, 3.0, 12.0, 32, 16)  # the same pixel on the tiles: tile 0's patch (1, 0)
    assert (label, labels[row]) == ("tile 0 patch (1, 0)", "t0(1,0)")
    # the peaks of the mean row: a tile's patch and the global image's patch, each named from its key's label
    ov = vm.overlay_view(r, vm.Selection(mode="head", head=1, image_from="tower"))
    mean = tower.mean(axis=0)
    tile, whole = _top(labels, mean, r"t\d\(\d,\d\)"), _top(labels, mean, r"\(\d,\d\)")
    assert ov.peak == f"peak at {_named(tile)} · global image 2×2 beside them, peak at {_named(whole)}"
    # a global patch as the query: named so in the title (what `attnviz figure --query` writes)
    ov = vm.overlay_view(r, vm.Selection(mode="head", head=1, image_from="tower", query=labels.index("(1,1)")))
    assert ov.query_label == "global image patch (1, 1)" and "query “global image patch (1, 1)”" in ov.title


def test_a_tiled_tower_without_the_decoders_grid_says_its_tiles_are_not_drawn():
    """A result holding Idefics3's tower but no decoder token grid (a folder without its tokenizer run on raw
    feeds: nothing says how the tiles lie): the global image alone, its patches named so, and the info line's note
    saying that the tiles are not drawn and why, rather than "+8 non-patch"."""
    from dataclasses import replace

    r = replace(_tiled(), token_grid=None)
    labels = list(r.tokens.labels)
    tower = r.maps[0].array()[0, 1]
    ov = vm.overlay_view(r, vm.Selection(mode="head", head=1, image_from="tower"))
    assert (ov.grid.rows, ov.grid.cols) == (2, 2) and ov.global_panel is None
    mean = tower[8:].mean(axis=0)  # the global image's rows: the one picture drawn
    np.testing.assert_allclose(ov.patch, placed(labels, mean, r"\((\d+),(\d+)\)"), rtol=1e-6)
    assert ov.peak == "peak at " + _named(_top(labels, mean, r"\(\d,\d\)"))
    assert vm.grid_note(r, r.blocks()[0], ov.grid) == (
        "global image only: its 2 tiles at keys 0–7 of the tower not drawn, no decoder image tokens to lay them out"
    )
    ov = vm.overlay_view(r, vm.Selection(mode="head", head=1, image_from="tower", query=labels.index("(0,1)")))
    assert ov.query_label == "global image patch (0, 1)" and ov.query_cell == (0, 1)
    # a decoder grid of three tiles for the tower's two: the tiles are not drawn either, and the note says why
    three = PatchGrid(1, 3, 1, (1, 2, 3), 5, global_grid=PatchGrid(1, 1, 4))
    r = replace(_tiled(), token_grid=three)
    grid = vm.block_grid(r, r.blocks()[0])
    assert grid.global_grid is None and vm.grid_note(r, r.blocks()[0], grid) == (
        "global image only: its 2 tiles at keys 0–7 of the tower not drawn, the decoder's image tokens do not lay "
        "them out"
    )


def _siglip() -> AttentionResult:
    """A SigLIP run: the image tower's two layers over its 2 x 3 patches (no CLS), its attention-pooling head (one
    learned query over the patches), the text tower's layer over three words."""
    rng = np.random.default_rng(4)
    maps = [DenseMap(_soft(rng, 2, 6, 6)) for _ in range(2)] + [DenseMap(_soft(rng, 2, 1, 6))]
    maps.append(DenseMap(_soft(rng, 2, 3, 3)))
    sites = [SiteInfo("encoder", "self", k, 2, f"v{k}", "softmax", tower="image") for k in range(2)]
    sites += [SiteInfo("encoder", "pooling", 0, 2, "p", "softmax", tower="image")]
    sites += [SiteInfo("encoder", "self", 0, 2, "t", "softmax", tower="text")]
    return AttentionResult(
        maps,
        sites,
        tokens=TokenAxis([f"({r},{c})" for r in range(2) for c in range(3)]),
        patch_grid=PatchGrid(2, 3),
        image=np.full((20, 30, 3), 90, np.uint8),
    )


def test_siglips_pooling_head_is_offered_and_draws_its_one_query_over_the_patches():
    r = _siglip()
    blocks = r.blocks()
    assert [(b.kind, b.tower) for b in blocks] == [("self", "image"), ("pooling", "image"), ("self", "text")]
    # the chooser: the image tower (its words' fallback too, named by what it is) and the pooling head
    assert [f.name for f in vm.image_attentions(r, blocks)] == ["tower", "pooling"]
    labels = list(blocks[1].key_axis.labels)
    probe = r.maps[2].array()[0]  # [heads, 1, patches]
    for sel in (
        vm.Selection(image_from="pooling", mode="head", head=1),
        vm.follow_block(r, blocks, vm.Selection(block=1, mode="head", head=1)),
    ):
        assert sel.image_from == "pooling"
        ov = vm.overlay_view(r, sel)
        assert ov.block_index == 1 and ov.query_label == "pooling query" and ov.query_cell is None
        np.testing.assert_allclose(ov.patch, placed(labels, probe[1, 0], r"\((\d+),(\d+)\)"), rtol=1e-6)
    # the mean over heads; rollout (square maps only) is their mean over a pooling head, as over words
    for mode in ("mean", "rollout"):
        ov = vm.overlay_view(r, vm.Selection(image_from="pooling", mode=mode, layer_lo=0, layer_hi=0))
        np.testing.assert_allclose(ov.patch, placed(labels, probe.mean(axis=0)[0], r"\((\d+),(\d+)\)"), rtol=1e-6)
    # the tower's block picked: the tower again (the mean of its patches' rows)
    assert vm.follow_block(r, blocks, vm.Selection(block=0, image_from="pooling")).image_from == "tower"
    ov = vm.overlay_view(r, vm.Selection(image_from="tower", mode="head", layer=1, head=0))
    tower = r.maps[1].array()[0, 0]
    np.testing.assert_allclose(ov.patch, placed(labels, tower.mean(axis=0), r"\((\d+),(\d+)\)"), rtol=1e-6)
    # no [CLS] in front of SigLIP's patches: the info line's note says nothing ("+0 non-patch" before); a ViT's, "+1"
    assert vm.grid_note(r, blocks[0], ov.grid) == ""
    vit = AttentionResult(
        [DenseMap(_soft(np.random.default_rng(2), 1, 5, 5))],
        [SiteInfo("encoder", "self", 0, 1, "e", "softmax")],
        tokens=TokenAxis(["CLS", *"abcd"]),
        patch_grid=PatchGrid(2, 2, 1),
    )
    assert vm.grid_note(vit, vit.blocks()[0], vm.block_grid(vit, vit.blocks()[0])) == "+1 non-patch"
    # a figure of the pooling block names it
    from attnviz.figures import FigureSpec
    from attnviz.figures.select import resolve

    assert resolve(r, FigureSpec(view="image", block=1)).image_from == "pooling"
    assert resolve(r, FigureSpec(view="image", image_from="pooling")).block == 1
