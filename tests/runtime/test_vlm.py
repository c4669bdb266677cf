"""Issue 22 items 1–2, LLaVA: the Hub's three-file layout (vision_encoder / embed_tokens / decoder_model_merged)
opens as one model; every map equals transformers' eager attention of the whole LlavaForConditionalGeneration on
the same image and prompt, and each image-token column is labelled with the patch torch puts there."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import vlm_models as vm  # noqa: E402
from PIL import Image  # noqa: E402

from attnviz import AttnvizError  # noqa: E402
from attnviz.runtime import builders as bd  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402
from attnviz.runtime.protocol import AttnModel  # noqa: E402
from attnviz.runtime.request import AnalyzeRequest  # noqa: E402
from attnviz.runtime.vlm import VLMSet  # noqa: E402

PROMPT = "<s> <image> a photo of the cat"
TOL = 5e-4


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    p = tmp_path_factory.mktemp("img") / "photo.png"
    Image.fromarray((np.random.default_rng(3).random((48, 40, 3)) * 255).astype(np.uint8)).save(p)
    return p


@pytest.fixture(scope="module")
def torch_model():
    return vm.build()


@pytest.fixture(params=["merged", "with-past"])
def any_llava(request):
    """Both forms of decoder_model_merged.onnx on the Hub: optimum's If-merged file, a with-past file alone."""
    return request.getfixturevalue("llava_repo" if request.param == "merged" else "llava_with_past_repo")


def processor(repo):
    """transformers' own LlavaProcessor from the repository's files (the placeholder expansion's reference)."""
    return transformers.LlavaProcessor(
        image_processor=transformers.CLIPImageProcessor.from_pretrained(str(repo)),
        tokenizer=transformers.PreTrainedTokenizerFast.from_pretrained(str(repo)),
        patch_size=vm.PATCH,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
    )


@pytest.mark.parametrize("where", ["repo", "onnx"])
def test_repo_or_its_onnx_folder_opens_as_one_model(llava_repo, where):
    m = open_model(llava_repo if where == "repo" else llava_repo / "onnx", provider="cpu")
    assert isinstance(m, VLMSet) and isinstance(m, AttnModel)
    assert m.kind == "vision-decoder" and m.name == "tiny-llava"
    assert [i.name for i in m.inputs] == ["pixel_values", "input_ids", "attention_mask"]
    # vision_feature_layer -2: the export keeps the vision layers up to the chosen one (here the first of two)
    assert [(s.stack, s.kind, s.layer) for s in m.sites] == [
        ("encoder", "self", 0),
        ("decoder", "self", 0),
        ("decoder", "self", 1),
    ]


def test_prompt_expanded_as_the_llava_processor_does(llava_repo, image):
    m = open_model(llava_repo, provider="cpu")
    prep = bd.prepare(m, AnalyzeRequest(text=PROMPT, image=str(image)))
    want = processor(llava_repo)(text=PROMPT, images=Image.open(image).convert("RGB"), return_tensors="np")
    assert prep.prompts == [want["input_ids"][0].tolist()]
    assert (np.asarray(prep.prompts[0]) == vm.IMAGE_TOKEN).sum() == vm.N_IMAGE
    # the image through the repository's preprocessor: resize to 32x32, rescale, CLIP's mean/std (the resampling
    # of the two resizers differs slightly, so compare the normalised values loosely)
    assert prep.feeds["pixel_values"].shape == want["pixel_values"].shape
    assert np.abs(prep.feeds["pixel_values"] - want["pixel_values"]).mean() < 0.05


def test_every_map_equals_transformers_eager(any_llava, image, torch_model):
    m = open_model(any_llava, provider="cpu")
    r = m.analyze(text=PROMPT, image=str(image))
    prep = bd.prepare(m, AnalyzeRequest(text=PROMPT, image=str(image)))
    px, ids = prep.feeds["pixel_values"], np.asarray(prep.prompts, np.int64)
    vision, decoder, logits = vm.reference(torch_model, px, ids)
    ref = [vision[0], *decoder]
    assert len(r.maps) == len(ref)
    for got, want in zip(r.maps, ref):
        assert got.shape == want.shape
        assert np.abs(got.array() - want).max() < TOL
    assert np.abs(r.outputs["logits"] - logits).max() < TOL


def test_raw_feeds_batch_of_two(llava_repo, torch_model):
    """Two images, two prompts (the processor's own pixel values and ids), every row's maps as transformers'."""
    m = open_model(llava_repo, provider="cpu")
    proc = processor(llava_repo)
    imgs = [Image.fromarray((np.random.default_rng(s).random((32, 32, 3)) * 255).astype(np.uint8)) for s in (5, 6)]
    enc = proc(text=["<image> a cat", "red <image> dog"], images=imgs, return_tensors="np")
    feeds = {
        "pixel_values": enc["pixel_values"],
        "input_ids": enc["input_ids"],
        "attention_mask": enc["attention_mask"],
    }
    r = m.analyze(feeds=feeds)
    vision, decoder, _ = vm.reference(torch_model, enc["pixel_values"], enc["input_ids"])
    for got, want in zip(r.maps, [vision[0], *decoder]):
        assert np.abs(got.array() - want).max() < TOL


def test_image_columns_labelled_with_the_patch_torch_puts_there(llava_repo, image, torch_model):
    """Hand-built: an image bright in one patch only; torch's patch embedding changes exactly one image token,
    and the decoder's column of that token is labelled with that patch's row and column."""
    m = open_model(llava_repo, provider="cpu")
    r = m.analyze(text=PROMPT, image=str(image))
    keys = r.blocks()[-1].key_axis.labels
    first = keys.index("(0,0)")
    conv = torch_model.model.vision_tower.embeddings.patch_embedding
    base = torch.zeros(1, 3, vm.IMAGE, vm.IMAGE)
    for row in range(vm.GRID):
        for col in range(vm.GRID):
            px = base.clone()
            px[..., row * vm.PATCH : (row + 1) * vm.PATCH, col * vm.PATCH : (col + 1) * vm.PATCH] = 1.0
            with torch.no_grad():  # as CLIPVisionEmbeddings: conv, flatten(2), transpose -> [B, patches, dim]
                diff = (conv(px) - conv(base)).flatten(2).transpose(1, 2)[0].abs().sum(-1)
            k = int(torch.nonzero(diff).flatten().item())
            assert keys[first + k] == f"({row},{col})"
    assert keys[:first] == ["<s>"] and keys[first + vm.N_IMAGE :] == "a photo of the cat".split()


def test_prompt_without_the_placeholder_is_one_line(llava_repo, image):
    m = open_model(llava_repo, provider="cpu")
    with pytest.raises(AttnvizError, match="image tokens.*write <image> once"):
        m.analyze(text="a photo of the cat", image=str(image))


def test_other_family_refused_in_one_line(llava_repo, tmp_path):
    import json
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(llava_repo, repo)
    cfg = json.loads((repo / "config.json").read_text())
    (repo / "config.json").write_text(json.dumps(cfg | {"model_type": "mllama"}))
    with pytest.raises(AttnvizError, match=r"'mllama'.*llava, idefics3.* only"):
        open_model(repo, provider="cpu")
    (repo / "config.json").unlink()
    with pytest.raises(AttnvizError, match="no readable config.json"):
        open_model(repo / "onnx", provider="cpu")


def test_the_set_satisfies_the_model_protocol(llava_repo):
    """The same member checks as every other kind (tests/runtime/test_model_protocol.py)."""
    from test_model_protocol import VALUE_CHECKS

    from attnviz.runtime.protocol import METHODS

    m = open_model(llava_repo, provider="cpu")
    for member, ok in VALUE_CHECKS.items():
        assert member in vars(type(m)) or member in vars(m), member
        assert ok(m, getattr(m, member)), member
    for member in METHODS:
        assert callable(getattr(m, member)), member
    assert m.probe() and [s.heads for s in m.sites] == [vm.HEADS] * 3
    assert m.vision_tower is True  # its encoder sites are the vision tower's ("vision" in inspect and the views)
    d = m.describe()
    assert d["kind"] == "vision-decoder" and d["files"] == [
        "vision_encoder.onnx",
        "embed_tokens.onnx",
        "decoder_model_merged.onnx",
    ]
    stepper = m.cache_stepper()
    assert callable(stepper.start) and callable(stepper.step) and callable(stepper.steps)
    assert m.grid(17, (32, 32)) is not None and m.pair_with_encoder() is None


@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_equals_transformers_greedy(any_llava, image, torch_model, use_cache):
    """--generate through the decoder's cache (and by re-running the sequence): transformers' greedy tokens, and
    the cached steps' maps are the full run's over the whole sequence."""
    m = open_model(any_llava, provider="cpu")
    r = m.analyze(text=PROMPT, image=str(image), generate=4, use_cache=use_cache)
    prep = bd.prepare(m, AnalyzeRequest(text=PROMPT, image=str(image)))
    ids = torch.as_tensor(np.asarray(prep.prompts, np.int64))
    with torch.no_grad():
        out = torch_model.generate(
            input_ids=ids,
            pixel_values=torch.as_tensor(prep.feeds["pixel_values"]),
            attention_mask=torch.ones_like(ids),
            max_new_tokens=4,
            do_sample=False,
            eos_token_id=None,
        )
    assert r.info["generated_ids"] == out[0, ids.shape[1] :].tolist()
    assert r.info["generation"] == ("kv-cache" if use_cache else "full re-run")
    full = np.asarray([prep.prompts[0] + r.info["generated_ids"][:-1]], np.int64)
    vision, decoder, _ = vm.reference(torch_model, prep.feeds["pixel_values"], full)
    for got, want in zip(r.maps, [vision[0], *decoder]):
        assert got.shape == want.shape and np.abs(got.array() - want).max() < TOL


def test_image_regions_show_a_word_over_the_image(llava_repo, image, torch_model, tmp_path):
    """The decoder's self-attention from a text row to the image-token columns, placed on the patch grid: the
    Image regions overlay (and its figure, the same view model) of a typed word is transformers' eager row."""
    from attnviz.core import io
    from attnviz.core import view as v
    from attnviz.core.attention import PatchGrid

    m = open_model(llava_repo, provider="cpu")
    r = m.analyze(text=PROMPT, image=str(image))
    first = 1  # "<s>" then the image's 16 tokens
    assert r.token_grid == PatchGrid(vm.GRID, vm.GRID, first)
    blocks = r.blocks()
    dec = next(i for i, b in enumerate(blocks) if b.stack == "decoder")
    assert v.image_source(r, blocks)[:2] == (dec, r.token_grid)  # the words' attention, not the vision tower's
    queries = v.image_queries(r, blocks[dec], r.token_grid)
    # each row named by the word it produced (words24): the next prompt token, "(next)" for the last row
    assert [w for w, _ in queries] == "photo of the cat (next)".split()
    prep = bd.prepare(m, AnalyzeRequest(text=PROMPT, image=str(image)))
    _, decoder, _ = vm.reference(torch_model, prep.feeds["pixel_values"], np.asarray(prep.prompts, np.int64))
    row = dict(queries)["cat"]
    for layer, head in ((0, 1), (1, 3)):
        ov = v.overlay_view(r, v.Selection(block=dec, layer=layer, head=head, query=row))
        want = decoder[layer][0, head, row, first : first + vm.N_IMAGE].reshape(vm.GRID, vm.GRID)
        assert ov.query_label == "cat" and ov.block_index == dec
        assert np.abs(ov.patch - want).max() < TOL
    # the grid travels with the result's .npz
    io.save_npz(r, tmp_path / "r.npz")
    assert io.load_npz(tmp_path / "r.npz").token_grid == r.token_grid


def test_the_image_figure_opens_on_the_words_over_the_image(llava_repo, image):
    """The figure's image view takes the same block the screen opens on (the decoder's words over the image
    tokens), and refuses nothing the screen draws."""
    from attnviz.core import view as v
    from attnviz.figures import select

    r = open_model(llava_repo, provider="cpu").analyze(text=PROMPT, image=str(image))
    blocks = r.blocks()
    assert select.WHY_NOT["image"](r) is None
    assert select._image_block(r, None) == v.image_source(r, blocks)[0] == 1
    assert select._image_block(r, 0) == 0  # the vision tower's own self-attention stays drawable


@pytest.mark.parametrize("inprocess", [False, True])
def test_cached_generation_loops_beside_the_decoder(any_llava, image, monkeypatch, inprocess):
    """Each generated token goes through embed_tokens.onnx and the decoder inside one loop where the sessions live
    (no request per token; issue 26's StepPlan, with the embedding run beside the decoder): the same tokens and
    every step's maps as the full re-run, on the isolation child and in-process alike."""
    from attnviz.runtime import vlm

    if inprocess:
        monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    m = open_model(any_llava, provider="cpu")
    full = m.analyze(text=PROMPT, image=str(image), generate=6, use_cache=False)

    def no_step(self, tokens):
        raise AssertionError("a generated token took a request of its own")

    monkeypatch.setattr(vlm.VLMCache, "step", no_step)
    r = m.analyze(text=PROMPT, image=str(image), generate=6)
    assert r.info["generation"] == "kv-cache" and r.info["generated_ids"] == full.info["generated_ids"]
    for a, b in zip(r.maps, full.maps):
        np.testing.assert_allclose(a.array(), b.array(), atol=1e-5)
