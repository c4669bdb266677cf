"""Several images in one prompt (Qwen2-VL, LLaVA; Qwen2.5-VL, Idefics3 and PaliGemma in
test_vlm_several_images_families.py): the prompt's placeholders matched to the images in order, as
the family's processor does; every map, the logits and greedy tokens equal transformers' eager attention on the
same two-image prompt; each image's run of tokens is where the processor puts it, labelled with its image
(``img1(r,c)``, ``img2(r,c)``); a count mismatch, images of two sizes and a family that takes one image a prompt are
one line each."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import qwen2vl_models as qm  # noqa: E402
import vlm_build as vb  # noqa: E402
import vlm_models as lm  # noqa: E402
from PIL import Image  # noqa: E402

from attnviz import AttnvizError  # noqa: E402
from attnviz.core.io import load_npz, save_npz  # noqa: E402
from attnviz.runtime import builders as bd  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402
from attnviz.runtime.request import AnalyzeRequest  # noqa: E402

QWEN = "<|vision_start|><|image_pad|><|vision_end|>dog<|vision_start|><|image_pad|><|vision_end|>where the cat"
TOL = 5e-4


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("two")
    # one size (resized to 48 x 64: 3 x 4 image tokens each), other pixels
    return vb.random_image(d / "a.png", 45, 70, 3), vb.random_image(d / "b.png", 45, 70, 4)


@pytest.fixture(scope="module")
def qwen():
    return qm.build()


def _qwen_processed(paths):
    """transformers' image processor on both images: pixel_values of both, image_grid_thw [2, 3]."""
    p = qm.image_processor()(images=[Image.open(x).convert("RGB") for x in paths], return_tensors="np")
    return p["pixel_values"], p["image_grid_thw"]


def _runs(ids, token):
    on = np.asarray(ids) == token
    return [int(k) for k in np.flatnonzero(on & ~np.concatenate([[False], on[:-1]]))]


def test_qwen2vl_two_images_equal_transformers_eager(qwen2vl_repo, images, qwen):
    m = open_model(qwen2vl_repo, provider="cpu")
    r = m.analyze(text=QWEN, image=list(images))
    px, grid = _qwen_processed(images)
    assert grid.tolist() == [[1, 6, 8], [1, 6, 8]]
    # the prompt: Qwen2VLProcessor's expansion, each <|image_pad|> to its image's tokens in order
    ids = qm.tokenizer()(qm.expand(QWEN, grid))["input_ids"]
    assert r.decoder_ids == [ids]
    # the vision tower: one block per image on the diagonal, each transformers' cu_seqlens chunk of that block
    seen = qm.record_vision_attention(qwen, px, grid)
    assert len(seen) == 2 * 2  # two blocks, two images each
    p = 6 * 8
    for layer in range(2):
        a = r.maps[layer].array()
        assert a.shape == (1, qm.HEADS, 2 * p, 2 * p)
        for k in range(2):
            want = seen[2 * layer + k][0]
            assert np.abs(a[0, :, k * p : (k + 1) * p, k * p : (k + 1) * p] - want).max() < TOL
        assert not a[0, :, :p, p:].any() and not a[0, :, p:, :p].any()  # an image never attends to the other
    _, decoder, logits = qm.reference(qwen, px, grid, np.asarray([ids]))
    assert max(float(np.abs(got.array() - want).max()) for got, want in zip(r.maps[2:], decoder)) < TOL
    assert np.abs(r.outputs["logits"] - logits).max() < TOL
    # each image's tokens: the processor's runs, labelled with their image; the images kept in order
    starts = _runs(ids, qm.IMAGE_TOKEN)
    assert [g.offset for g in r.image_grids()] == starts and [(g.rows, g.cols) for g in r.image_grids()] == [(3, 4)] * 2
    labels = r.blocks()[-1].key_axis.labels
    assert labels[starts[0]] == "img1(0,0)" and labels[starts[0] + 5] == "img1(1,1)"
    assert labels[starts[1]] == "img2(0,0)" and labels[starts[1] + 11] == "img2(2,3)"
    assert len(r.images) == 2 and r.images[0] is r.image
    assert np.array_equal(r.images[1], np.asarray(Image.open(images[1]).convert("RGB").resize((64, 48), 3)))
    assert r.info["images"] == list(images)
    assert r.picture(1).token_grid.offset == starts[1] and r.picture(1).image is r.images[1]


def test_qwen2vl_two_images_without_placeholders_go_before_the_text(qwen2vl_repo, images):
    """As the chat template puts each image before the text, in order."""
    m = open_model(qwen2vl_repo, provider="cpu")
    prep = bd.prepare(m, AnalyzeRequest(text="where the cat", image=list(images)))
    _, grid = _qwen_processed(images)
    want = qm.tokenizer()(qm.expand("<|vision_start|><|image_pad|><|vision_end|>" * 2 + "where the cat", grid))
    assert prep.prompts == [want["input_ids"]]


@pytest.mark.parametrize("use_cache", [True, False])
def test_qwen2vl_two_images_generation_equals_transformers_greedy(qwen2vl_repo, images, qwen, use_cache):
    m = open_model(qwen2vl_repo, provider="cpu")
    r = m.analyze(text=QWEN, image=list(images), generate=5, use_cache=use_cache)
    px, grid = _qwen_processed(images)
    ids = torch.as_tensor([qm.tokenizer()(qm.expand(QWEN, grid))["input_ids"]])
    out = qm.greedy(qwen, ids, px, grid, 5)
    assert r.info["generated_ids"] == out[0, ids.shape[1] :].tolist()
    assert r.info["generation"] == ("kv-cache" if use_cache else "full re-run")
    _, decoder, _ = qm.reference(qwen, px, grid, out[:, :-1])
    assert max(float(np.abs(got.array() - want).max()) for got, want in zip(r.maps[2:], decoder)) < TOL


def test_llava_two_images_equal_transformers_eager(llava_repo, images):
    """LlavaProcessor's expansion of each <image>, the features of both images in order (one batched run of the
    vision file), every map and the logits as transformers' eager forward on pixel_values of both."""
    torch_model = lm.build()
    m = open_model(llava_repo, provider="cpu")
    text = "<image> and <image> where the cat"
    r = m.analyze(text=text, image=list(images))
    prep = bd.prepare(m, AnalyzeRequest(text=text, image=list(images)))
    px = prep.feeds["pixel_values"]
    assert px.shape[0] == 2
    one = [bd.prepare(m, AnalyzeRequest(text="<image>", image=i)).feeds["pixel_values"][0] for i in images]
    assert np.array_equal(px, np.stack(one))  # each image processed as alone, in order
    ids = np.asarray(prep.prompts, np.int64)
    n = lm.N_IMAGE
    assert int((ids == lm.IMAGE_TOKEN).sum()) == 2 * n
    vision, decoder, logits = lm.reference(torch_model, px, ids)
    n_vis = sum(s.stack == "encoder" for s in r.sites)  # the tower's layers up to the one whose features are taken
    assert n_vis >= 1 and len(r.maps) == n_vis + len(decoder)
    assert max(float(np.abs(got.array() - want).max()) for got, want in zip(r.maps[n_vis:], decoder)) < TOL
    assert np.abs(r.outputs["logits"] - logits).max() < TOL
    p = vision[0].shape[-1]
    for got, want in zip(r.maps[:n_vis], vision):  # the tower's maps of each image on the diagonal
        a = got.array()[0]
        for k in range(2):
            assert np.abs(a[:, k * p : (k + 1) * p, k * p : (k + 1) * p] - want[k]).max() < TOL
    # the vision block's keys by image, each image's CLS before its patches (as the graph concatenates them);
    # image 2's Image regions of the vision block: its own CLS and patches
    from attnviz.core import view as v

    vkeys = r.blocks()[0].key_axis.labels
    assert (vkeys[0], vkeys[1], vkeys[p], vkeys[p + 1], vkeys[-1]) == (
        "img1[CLS]",
        "img1(0,0)",
        "img2[CLS]",
        "img2(0,0)",
        f"img2({lm.GRID - 1},{lm.GRID - 1})",
    )
    second = r.picture(1)
    bi, grid, _ = v.image_source(second, r.blocks(), 0)
    assert bi == 0 and (grid.offset, grid.end) == (p + 1, 2 * p)
    assert v.image_queries(second, r.blocks()[0], grid) == [("img2[CLS]", p), ("all patches (mean)", -1)]
    placed = [k for k in range(ids.shape[1]) if ids[0, k] == lm.IMAGE_TOKEN]
    assert [g.offset for g in r.image_grids()] == [placed[0], placed[n]]
    keys = r.blocks()[-1].key_axis.labels
    assert keys[placed[0]] == "img1(0,0)" and keys[placed[n]] == "img2(0,0)"


@pytest.mark.parametrize("use_cache", [True, False])
def test_qwen2vl_two_images_of_their_own_sizes_equal_transformers(qwen2vl_repo, images, qwen, tmp_path, use_cache):
    """Each image resized to its own size (48 x 64: 3 x 4 tokens; 48 x 80: 3 x 5), as the processor does: one
    padded pixel_values with each image's size beside it, each image's own run of the vision file, grid,
    expansion, labels and M-RoPE positions; maps, logits and greedy tokens equal transformers'."""
    wide = vb.random_image(tmp_path / "wide.png", 60, 100, 5)
    two = [images[0], wide]
    m = open_model(qwen2vl_repo, provider="cpu")
    prep = bd.prepare(m, AnalyzeRequest(text=QWEN, image=two))
    assert prep.feeds["pixel_values"].shape == (2, 3, 48, 80)
    assert prep.feeds["image_sizes"].tolist() == [[48, 64], [48, 80]]
    assert not prep.feeds["pixel_values"][0, :, :, 64:].any()  # the first image, padded at its right
    px, grid = _qwen_processed(two)
    assert grid.tolist() == [[1, 6, 8], [1, 6, 10]]
    ids = qm.tokenizer()(qm.expand(QWEN, grid))["input_ids"]
    assert prep.prompts == [ids]
    r = m.analyze(text=QWEN, image=two, generate=4, use_cache=use_cache)
    seen = qm.record_vision_attention(qwen, px, grid)
    sizes = [48, 60]  # each image's patches
    for layer in range(2):
        a = r.maps[layer].array()[0]
        assert a.shape[-1] == sum(sizes)
        for k, (at, p) in enumerate(((0, 48), (48, 60))):
            assert np.abs(a[:, at : at + p, at : at + p] - seen[2 * layer + k][0]).max() < TOL
    qwen.model.rope_deltas = None
    with torch.no_grad():
        out = qwen.generate(
            input_ids=torch.as_tensor([ids]),
            pixel_values=torch.as_tensor(px),
            image_grid_thw=torch.as_tensor(grid),
            mm_token_type_ids=qm.image_types([ids]),
            attention_mask=torch.ones((1, len(ids)), dtype=torch.int64),
            max_new_tokens=4,
            do_sample=False,
            eos_token_id=None,
        )
    assert r.info["generated_ids"] == out[0, len(ids) :].tolist()
    _, decoder, _ = qm.reference(qwen, px, grid, out[:, :-1])
    assert max(float(np.abs(got.array() - want).max()) for got, want in zip(r.maps[2:], decoder)) < TOL
    starts = _runs(ids, qm.IMAGE_TOKEN)
    assert [(g.rows, g.cols, g.offset) for g in r.image_grids()] == [(3, 4, starts[0]), (3, 5, starts[1])]
    keys = r.blocks()[-1].key_axis.labels
    assert keys[starts[1] + 5] == "img2(1,0)" and keys[starts[1] + 14] == "img2(2,4)"
    assert [a.shape for a in r.images] == [(48, 64, 3), (48, 80, 3)]
    # the same prompt as raw feeds (pixel_values, image_sizes, input_ids): the same maps, labels and grids
    raw = m.analyze(
        feeds={k: prep.feeds[k] for k in ("pixel_values", "image_sizes")} | {"input_ids": np.asarray([ids])}
    )
    plain = m.analyze(text=QWEN, image=two)
    assert raw.blocks()[-1].key_axis.labels == plain.blocks()[-1].key_axis.labels
    assert [(g.rows, g.cols, g.offset) for g in raw.image_grids()] == [(3, 4, starts[0]), (3, 5, starts[1])]
    assert all(np.array_equal(x.array(), y.array()) for x, y in zip(raw.maps, plain.maps))


def test_several_images_survive_the_npz(qwen2vl_repo, images, tmp_path):
    m = open_model(qwen2vl_repo, provider="cpu")
    r = m.analyze(text=QWEN, image=list(images))
    back = load_npz(save_npz(r, tmp_path / "m.npz"))
    assert [g.offset for g in back.image_grids()] == [g.offset for g in r.image_grids()]
    assert len(back.images) == 2 and np.array_equal(back.images[1], r.images[1])


def test_mismatches_are_one_line(qwen2vl_repo, llava_repo, images, tmp_path):
    q = open_model(qwen2vl_repo, provider="cpu")
    one_pad = "<|vision_start|><|image_pad|><|vision_end|>where the cat"
    with pytest.raises(AttnvizError, match=r"holds 1 <\|image_pad\|> placeholder and 2 images were given") as e:
        q.analyze(text=one_pad, image=list(images))
    assert "once per image" in str(e.value) and "leave them all out" in str(e.value)
    ids = np.asarray([[3, qm.IMAGE_TOKEN, 4, 3, qm.IMAGE_TOKEN, 4]], np.int64)
    px = np.zeros((2, 3, 16, 16), np.float32)
    with pytest.raises(AttnvizError, match=r"image_sizes of shape \(1, 2\): give one integer \(height, width\)"):
        q.analyze(feeds={"pixel_values": px, "input_ids": ids, "image_sizes": np.asarray([[16, 16]])})
    with pytest.raises(AttnvizError, match=r"image_sizes \[\[16, 16\], \[32, 16\]\]: each image's size within"):
        q.analyze(feeds={"pixel_values": px, "input_ids": ids, "image_sizes": np.asarray([[16, 16], [32, 16]])})
    v = open_model(llava_repo, provider="cpu")
    with pytest.raises(AttnvizError, match="holds 1 <image> placeholder and 2 images.*once per image"):
        v.analyze(text="<image> where the cat", image=list(images))
    with pytest.raises(AttnvizError, match="holds 3 <image> placeholders and 2 images"):
        v.analyze(text="<image><image><image> cat", image=list(images))


def test_a_family_taking_one_image_is_one_line(llava_repo):
    """Every family registered takes several images; one that did not (its processor matching one image a prompt)
    would be refused in one line naming those that do."""
    import json

    from attnviz.runtime.vlm_families import FAMILIES, Llava, check_several

    class OneImage(Llava):
        name = "one-image"
        several_images = False

    assert all(cls.several_images for cls in FAMILIES.values())
    cfg = json.loads((llava_repo / "config.json").read_text())
    check_several(OneImage(cfg, {}, {}, "test"), 1)
    with pytest.raises(AttnvizError, match="one image per prompt for one-image .*llava, idefics3, paligemma, qwen2-vl"):
        check_several(OneImage(cfg, {}, {}, "test"), 2)


def test_a_model_taking_one_image_a_run_is_one_line(llava_repo, images):
    """An image encoder alone (LLaVA's vision file opened as one file): two images are one line naming the fix."""
    m = open_model(llava_repo / "onnx" / "vision_encoder.onnx", provider="cpu")
    assert not isinstance(m, type(open_model(llava_repo, provider="cpu")))
    with pytest.raises(AttnvizError, match="2 images given and .* takes one image per run; give one image"):
        m.analyze(image=list(images))


def test_cli_takes_image_more_than_once(qwen2vl_repo, images, tmp_path, capsys):
    from attnviz.cli import main

    out = tmp_path / "m.npz"
    assert (
        main(
            [
                "extract",
                str(qwen2vl_repo),
                "--image",
                images[0],
                "--image",
                images[1],
                "--text",
                QWEN,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert len(load_npz(out).image_grids()) == 2
    capsys.readouterr()
    bad = ["extract", str(qwen2vl_repo), "--image", images[0], "--image", images[1], "--text", "<|image_pad|>cat"]
    assert main([*bad, "--out", str(tmp_path / "n.npz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "placeholder and 2 images were given" in err[0]
