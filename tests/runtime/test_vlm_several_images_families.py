"""Several images in one prompt for Qwen2.5-VL, Idefics3 / SmolVLM and PaliGemma, each against transformers' own
processor and eager model on the same two-image prompt: the ids (each placeholder expanded to its own image's
tokens, in order) and pixel values as the processor makes them, every map (the vision tower's of each image on the
diagonal, the decoder's), the logits and greedy tokens; each image's tokens labelled with their image; each image's
patches among the vision tower's keys on their own grid (``img2(r,c)``), as transformers places them."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import idefics3_models as im  # noqa: E402
import paligemma_models as pm  # noqa: E402
import qwen2vl_models as q2  # noqa: E402
import qwen25vl_models as q5  # noqa: E402
import vlm_build as vb  # noqa: E402
from PIL import Image  # noqa: E402

from attnviz import AttnvizError  # noqa: E402
from attnviz.core.io import load_npz, save_npz  # noqa: E402
from attnviz.runtime import builders as bd  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402
from attnviz.runtime.request import AnalyzeRequest  # noqa: E402

TOL = 5e-4
QWEN = "<|vision_start|><|image_pad|><|vision_end|>dog<|vision_start|><|image_pad|><|vision_end|>where the cat"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("two")
    sizes = {"a": (45, 70), "b": (45, 70), "wide": (60, 100), "square": (70, 64), "flat": (30, 90)}
    return {k: vb.random_image(d / f"{k}.png", h, w, seed) for seed, (k, (h, w)) in enumerate(sizes.items(), start=3)}


def _rgb(paths):
    return [Image.open(p).convert("RGB") for p in paths]


def _runs(ids, token):
    on = np.asarray(ids) == token
    return [int(k) for k in np.flatnonzero(on & ~np.concatenate([[False], on[:-1]]))]


def _diagonal(a: np.ndarray, blocks: list[np.ndarray]) -> None:
    """``a`` [H, N, N] holds ``blocks`` (each [H, P, P]) on its diagonal, in order, and nothing off it."""
    at = 0
    for w in blocks:
        p = w.shape[-1]
        assert np.abs(a[:, at : at + p, at : at + p] - w).max() < TOL
        at += p
    assert at == a.shape[-1]
    assert a.sum(-1) == pytest.approx(1.0, abs=1e-5)  # every row's weight within its own image


# -- Qwen2.5-VL ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def qwen25_repo(tmp_path_factory):
    return vb.cached_repo(q5.save_repo, tmp_path_factory.mktemp("qwen25vl") / "tiny-qwen2.5-vl")


@pytest.fixture(scope="module")
def qwen25():
    return q5.build()


def _qwen25_vision(m, px, grid) -> list[np.ndarray]:
    """transformers' eager vision attention over all the images at once (grid [N, 3]): every block's chunks --
    its windows, or each whole image -- on the diagonal of one map in its (window) order."""
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as mq

    seen = q2.record_vision_attention(m, px, grid, mq)
    return q5.on_diagonal(seen, int(np.prod(grid, axis=1).sum()))


@pytest.mark.parametrize("second", ["b", "wide"])  # the same size (3 x 4 tokens each), or 3 x 5
def test_qwen25vl_two_images_equal_transformers(qwen25_repo, qwen25, files, second):
    """Each image's run of the vision file orders and windows its own patches, as transformers' windows over
    several images (get_vision_window_index windows each image apart; its full blocks attend within one image)."""
    from transformers.vision_utils import get_vision_position_ids, get_vision_window_index

    two = [files["a"], files[second]]
    m = open_model(qwen25_repo, provider="cpu")
    r = m.analyze(text=QWEN, image=two, generate=4)
    p = q2.image_processor()(images=_rgb(two), return_tensors="np")
    px, grid = p["pixel_values"], p["image_grid_thw"]
    assert grid.tolist() == [[1, 6, 8], [1, 6, 8 if second == "b" else 10]]
    ids = q2.tokenizer()(q2.expand(QWEN, grid))["input_ids"]  # Qwen2VLProcessor's expansion, image by image
    prep = bd.prepare(m, AnalyzeRequest(text=QWEN, image=two))
    assert prep.prompts == [ids]
    out = q2.greedy(qwen25, torch.as_tensor([ids]), px, grid, 4)
    assert r.info["generated_ids"] == out[0, len(ids) :].tolist()
    vision = _qwen25_vision(qwen25, px, grid)
    _, decoder, _ = q2.reference(qwen25, px, grid, out[:, :-1])
    got = [a.array() for a in r.maps]
    assert [g.shape for g in got] == [w.shape for w in vision + decoder]
    assert max(float(np.abs(g - w).max()) for g, w in zip(got, vision + decoder)) < TOL
    assert (got[0] == 0).mean() > 0.5 and (got[1][0, :, :48, :48] == 0).mean() == 0  # windows; the full block's
    plain = m.analyze(text=QWEN, image=two)
    _, _, logits = q2.reference(qwen25, px, grid, np.asarray([ids]))
    assert np.abs(plain.outputs["logits"] - logits).max() < TOL
    # each image's tokens where the processor puts them; each vision key on the patch transformers rotates it by
    starts = _runs(ids, q2.IMAGE_TOKEN)
    assert [(g.offset, g.rows, g.cols) for g in r.image_grids()] == [
        (s, int(h) // 2, int(w) // 2) for s, (_, h, w) in zip(starts, grid)
    ]
    pos = get_vision_position_ids(torch.as_tensor(grid), q5.MERGE)
    index, _ = get_vision_window_index(torch.as_tensor(grid), q5.MERGE, q5.WINDOW, q5.PATCH)
    pos = pos.reshape(-1, q5.MERGE**2, 2)[index].reshape(-1, 2).tolist()
    first = int(np.prod(grid[0]))
    assert r.blocks()[0].key_axis.labels == [f"img{1 if k < first else 2}({h},{w})" for k, (h, w) in enumerate(pos)]
    # the same prompt as raw feeds (pixel_values, image_sizes where the sizes differ, input_ids): the same maps,
    # labels and grids
    raw = m.analyze(
        feeds={k: v for k, v in prep.feeds.items() if k in ("pixel_values", "image_sizes")}
        | {"input_ids": np.asarray([ids])}
    )
    assert [b.key_axis.labels for b in raw.blocks()] == [b.key_axis.labels for b in plain.blocks()]
    assert raw.image_grids() == plain.image_grids() and raw.vision_grids() == plain.vision_grids()
    assert all(np.array_equal(x.array(), y.array()) for x, y in zip(raw.maps, plain.maps))


# -- Idefics3 / SmolVLM ------------------------------------------------------------------------------------------------
IDEFICS = "<s> <image> a photo <image> of the cat"


@pytest.fixture(scope="module")
def idefics():
    return im.build()


def test_idefics3_two_images_equal_transformers(idefics3_repo, idefics, files):
    """Idefics3Processor with both images for one text: each <image> its own image's tiles and global image (2 x 2
    and 1 x 2 tiles), the row's pixel_values every image's frames in order; every map, logits and greedy tokens."""
    two = [files["square"], files["flat"]]
    m = open_model(idefics3_repo, provider="cpu")
    enc = im.processor(idefics3_repo)(text=[IDEFICS], images=[_rgb(two)], return_tensors="np")
    prep = bd.prepare(m, AnalyzeRequest(text=IDEFICS, image=two))
    assert prep.prompts == [enc["input_ids"][0].tolist()]
    assert prep.feeds["pixel_values"].shape == enc["pixel_values"].shape == (1, 5 + 3, 3, im.TILE, im.TILE)
    assert np.abs(prep.feeds["pixel_values"] - enc["pixel_values"]).max() < 1e-4
    r = m.analyze(text=IDEFICS, image=two)
    vision, decoder, logits = im.reference(idefics, enc)
    for got, want in zip(r.maps[:2], vision):  # every frame of both images on the diagonal
        _diagonal(got.array()[0], list(want))
    assert max(float(np.abs(got.array() - want).max()) for got, want in zip(r.maps[2:], decoder)) < TOL
    assert np.abs(r.outputs["logits"] - logits).max() < TOL
    with torch.no_grad():
        out = idefics.generate(
            **{k: torch.as_tensor(v) for k, v in enc.items()}, max_new_tokens=4, do_sample=False, eos_token_id=None
        )
    n = enc["input_ids"].shape[1]
    assert m.analyze(text=IDEFICS, image=two, generate=4).info["generated_ids"] == out[0, n:].tolist()
    # each image's tokens: its tiles side by side and its global image, where the processor put them
    ids = enc["input_ids"][0]
    runs = [k for k in range(n) if ids[k] == im.IMAGE_TOKEN]
    grids = r.image_grids()
    assert [(g.rows, g.cols) for g in grids] == [(2 * im.SIDE, 2 * im.SIDE), (im.SIDE, 2 * im.SIDE)]
    spans = [sorted([*g.columns, *range(g.global_grid.offset, g.global_grid.offset + im.N_TILE)]) for g in grids]
    assert spans[0] + spans[1] == runs and len(spans[0]) == 5 * im.N_TILE
    labels = r.blocks()[-1].key_axis.labels
    assert labels[runs[0]] == "img1·tile 0·(0,0)" and labels[spans[0][-1]] == f"img1({im.SIDE - 1},{im.SIDE - 1})"
    assert labels[spans[1][0]] == "img2·tile 0·(0,0)" and labels[runs[-1]] == f"img2({im.SIDE - 1},{im.SIDE - 1})"
    # the vision tower's keys: image 1's five frames, then image 2's three, each image's global frame on its grid
    per = (im.TILE // im.PATCH) ** 2
    vg = r.vision_grids()
    assert [(g.offset, g.end, g.lead_images) for g in vg] == [(4 * per, 5 * per, 4), (7 * per, 8 * per, 2)]
    keys = r.blocks()[0].key_axis.labels
    assert keys[0] == "img1·tile 0·(0,0)" and keys[4 * per] == "img1(0,0)" and keys[5 * per] == "img2·tile 0·(0,0)"
    assert keys[-1] == f"img2({im.TILE // im.PATCH - 1},{im.TILE // im.PATCH - 1})"


def test_idefics3_two_images_as_raw_feeds(idefics3_repo, files):
    """The processor's own feeds (pixel_values of both images' frames, input_ids): the same maps, labels, token
    grids and vision grids as the prompt and images given."""
    two = [files["square"], files["flat"]]
    m = open_model(idefics3_repo, provider="cpu")
    enc = im.processor(idefics3_repo)(text=[IDEFICS], images=[_rgb(two)], return_tensors="np")
    raw = m.analyze(feeds={k: enc[k] for k in ("pixel_values", "input_ids", "attention_mask")})
    plain = m.analyze(text=IDEFICS, image=two)
    assert [b.key_axis.labels for b in raw.blocks()] == [b.key_axis.labels for b in plain.blocks()]
    assert raw.image_grids() == plain.image_grids() and len(raw.image_grids()) == 2
    assert raw.vision_grids() == plain.vision_grids() and len(raw.vision_grids()) == 2
    assert all(np.abs(x.array() - y.array()).max() < 1e-5 for x, y in zip(raw.maps, plain.maps))


def test_idefics3_placeholders_not_one_per_image_are_one_line(idefics3_repo, files):
    m = open_model(idefics3_repo, provider="cpu")
    two = [files["square"], files["flat"]]
    with pytest.raises(AttnvizError, match=r"holds 1 <image> placeholder and 2 images were given; write <image> once"):
        m.analyze(text="<s> <image> a photo of the cat", image=two)
    with pytest.raises(AttnvizError, match=r"holds 0 <image> placeholders and 2 images"):
        m.analyze(text="a photo of the cat", image=two)


# -- PaliGemma ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pali():
    return pm.build()


@pytest.mark.parametrize("text", ["<image><image>a photo of the cat", "a photo of the cat"])
def test_paligemma_two_images_equal_transformers(paligemma_repo, pali, files, text):
    """PaliGemmaProcessor takes a list of images for one text: each <image> (or, with none, one per image in front)
    becomes its image's tokens, all before the BOS; the prefix mask over them all (token types 0)."""
    two = [files["a"], files["wide"]]
    m = open_model(paligemma_repo, provider="cpu")
    want = pm.processor(paligemma_repo)(text=[text], images=[_rgb(two)], return_tensors="np")
    prep = bd.prepare(m, AnalyzeRequest(text=text, image=two))
    assert prep.prompts == [want["input_ids"][0].tolist()]
    assert np.abs(prep.feeds["pixel_values"] - want["pixel_values"]).max() < 1e-4
    r = m.analyze(text=text, image=two, generate=4)
    ids = want["input_ids"]
    with torch.no_grad():
        out = pali.generate(
            **{k: torch.as_tensor(v) for k, v in want.items()}, max_new_tokens=4, do_sample=False, eos_token_id=None
        )
    n = ids.shape[1]
    assert r.info["generated_ids"] == out[0, n:].tolist()
    full = out[:, :-1]
    vision, decoder, _ = pm.reference(pali, want["pixel_values"], full, token_type_ids=pm.token_types(full, [n]))
    for got, w in zip(r.maps[: len(vision)], vision):
        _diagonal(got.array()[0], list(w))
    assert max(float(np.abs(g.array() - w).max()) for g, w in zip(r.maps[len(vision) :], decoder)) < TOL
    _, _, logits = pm.reference(pali, want["pixel_values"], ids, token_type_ids=torch.as_tensor(want["token_type_ids"]))
    assert np.abs(m.analyze(text=text, image=two).outputs["logits"] - logits).max() < TOL
    assert [g.offset for g in r.image_grids()] == [0, pm.N_IMAGE]
    labels = r.blocks()[-1].key_axis.labels
    assert (
        labels[0] == "img1(0,0)"
        and labels[pm.N_IMAGE] == "img2(0,0)"
        and labels[2 * pm.N_IMAGE - 1] == (f"img2({pm.GRID - 1},{pm.GRID - 1})")
    )
    assert r.blocks()[0].key_axis.labels[pm.N_IMAGE + 1] == "img2(0,1)"


def test_paligemma_placeholders_not_one_per_image_are_one_line(paligemma_repo, files):
    m = open_model(paligemma_repo, provider="cpu")
    with pytest.raises(AttnvizError, match=r"holds 1 <image> placeholder and 2 images.*or leave them all out"):
        m.analyze(text="<image>a photo of the cat", image=[files["a"], files["wide"]])


# -- each image's patches in the vision tower, on its own grid ------------------------------------------------------
def test_the_vision_block_of_each_image_on_its_own_grid(qwen2vl_repo, files, tmp_path):
    """Image regions of the vision block for image 2: image 2's patches as the queries and keys, drawn on image 2
    (by hand from the map's image-2 block and the img2(r,c) key labels), named 'image 2 of 2'; the .npz keeps
    each image's grid."""
    from attnviz.core import view as v

    two = [files["a"], files["wide"]]
    m = open_model(qwen2vl_repo, provider="cpu")
    r = m.analyze(text=QWEN, image=two)
    keys = r.blocks()[0].key_axis.labels
    first = sum(k.startswith("img1(") for k in keys)
    assert first == 48 and len(keys) == 48 + 60 and all(k.startswith("img2(") for k in keys[first:])
    sel = v.Selection(block=0, layer=1, head=2, picture=1)
    ov = v.overlay_view(r, sel)
    assert ov.block_index == 0 and (ov.grid.rows, ov.grid.cols) == (6, 10) and "image 2 of 2" in ov.title
    # the vision block's map (Head map, figure) says it holds both images; the overlay draws one, named
    assert v.compute_map(r, sel).title == "vision self-attention · layer 1 · head 2 · images 1–2 on the diagonal"
    assert "diagonal" not in ov.title and "diagonal" not in v.compute_map(r, sel.with_(block=1)).title
    row = r.maps[1].array()[0, 2, first:, :].mean(axis=0)  # image 2's patches as the queries (mean)
    want = np.zeros((6, 10))
    for k in range(first, len(keys)):
        rr, cc = map(int, keys[k][5:-1].split(","))
        want[rr, cc] = row[k]
    assert np.abs(ov.patch - want).max() < 1e-6
    assert ov.patch.sum() == pytest.approx(1.0, abs=1e-5)  # image 2's rows attend within image 2
    assert r.picture(1).image is r.images[1]
    # a patch of image 2 as the query: its own row, over image 2's grid
    q = first + 7
    cell = ov.grid.cell(q)
    ov2 = v.overlay_view(r, sel.with_(query=q))
    assert ov2.query_cell == cell and ov2.query_label == f"patch ({cell[0]}, {cell[1]})"
    back = load_npz(save_npz(r, tmp_path / "m.npz"))
    assert back.vision_grids() == r.vision_grids() and back.blocks()[0].key_axis.labels == keys
    assert back.patch_grid == r.patch_grid == r.vision_grids()[0]  # image 1's keys in their merge-window order
