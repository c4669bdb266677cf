"""Issue 22, PaliGemma (SigLIP + Gemma): the three-file layout opens as one model; the prompt is the processor's
layout (image tokens, BOS, prefix, newline; a suffix after); a decoder that takes token_type_ids gets the
processor's and its maps equal transformers' eager attention of the whole PaliGemmaForConditionalGeneration
(bidirectional over the image and prefix); the Hub's decoder (no token_type_ids: causal) is said to be the
export's in one line, and its maps are transformers' own causal ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import paligemma_models as pm  # noqa: E402
import vlm_build as vb  # noqa: E402
from PIL import Image  # noqa: E402

from attnviz.runtime import builders as bd  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402
from attnviz.runtime.request import AnalyzeRequest  # noqa: E402
from attnviz.runtime.vlm import VLMSet  # noqa: E402
from attnviz.runtime.vlm_families.paligemma import NO_PREFIX_MASK  # noqa: E402

PROMPT = "<image>a photo of the cat"
TOL = 5e-4


@pytest.fixture(scope="module")
def prefix_repo(paligemma_repo):
    """The decoder exported with a token_type_ids input (the prefix mask in the graph)."""
    return paligemma_repo


@pytest.fixture(scope="module")
def hub_repo(tmp_path_factory):
    """The decoder exported as the Hub's file: the language model alone, a 2-D mask, no token_type_ids."""
    return vb.cached_repo(pm.save_repo, tmp_path_factory.mktemp("paligemma-hub") / "tiny-paligemma", prefix=False)


@pytest.fixture(scope="module")
def torch_model():
    return pm.build()


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    p = tmp_path_factory.mktemp("img") / "photo.png"
    Image.fromarray((np.random.default_rng(3).random((48, 40, 3)) * 255).astype(np.uint8)).save(p)
    return p


def _max_diffs(maps, ref) -> list[float]:
    assert len(maps) == len(ref)
    out = []
    for got, want in zip(maps, ref):
        assert got.shape == want.shape
        out.append(float(np.abs(got.array() - want).max()))
    return out


def test_opens_as_one_model_with_its_family(prefix_repo):
    m = open_model(prefix_repo, provider="cpu")
    assert isinstance(m, VLMSet) and m.name == "tiny-paligemma"
    assert [(s.stack, s.kind, s.layer) for s in m.sites] == [
        ("encoder", "self", 0),
        ("encoder", "self", 1),
        ("decoder", "self", 0),
        ("decoder", "self", 1),
    ]
    d = m.describe()
    assert d["image_tokens"]["family"] == "paligemma" and d["image_tokens"]["grid"] == [pm.GRID, pm.GRID]
    assert not d["fidelity"]  # the prefix mask is in this decoder's graph


def test_prompt_laid_out_as_the_processor_does(prefix_repo, image):
    m = open_model(prefix_repo, provider="cpu")
    img = Image.open(image).convert("RGB")
    proc = pm.processor(prefix_repo)
    prep = bd.prepare(m, AnalyzeRequest(text=PROMPT, image=str(image)))
    want = proc(text=PROMPT, images=img, return_tensors="np")
    assert prep.prompts == [want["input_ids"][0].tolist()]
    # the pixel values: SigLIP's processor (PIL backend: bicubic resize, rescale, mean/std 0.5)
    assert prep.feeds["pixel_values"].shape == want["pixel_values"].shape
    assert np.abs(prep.feeds["pixel_values"] - want["pixel_values"]).max() < 1e-4
    # a suffix (the tokenizer's pair): its ids and token types as the processor's
    tok = m.tokenizers[1]
    enc = tok.encode("<image>a photo", pair="the cat")
    want = proc(text="<image>a photo", images=img, suffix="the cat", return_tensors="np")
    assert enc.ids == want["input_ids"][0].tolist() and enc.type_ids == want["token_type_ids"][0].tolist()
    assert m.family.token_types(np.asarray([enc.ids])).tolist() == want["token_type_ids"].tolist()
    # the processor's fallback for a prompt without <image>: the image's tokens in front
    assert tok.encode("a photo").ids == proc(text="a photo", images=img, return_tensors="np")["input_ids"][0].tolist()


def test_every_map_equals_transformers_eager(prefix_repo, image, torch_model):
    """Image and prefix attend bidirectionally (token types 0): every map as transformers' with the processor's
    token_type_ids."""
    m = open_model(prefix_repo, provider="cpu")
    r = m.analyze(text=PROMPT, image=str(image))
    prep = bd.prepare(m, AnalyzeRequest(text=PROMPT, image=str(image)))
    px, ids = prep.feeds["pixel_values"], np.asarray(prep.prompts, np.int64)
    vision, decoder, logits = pm.reference(torch_model, px, ids, token_type_ids=pm.token_types(ids))
    assert max(_max_diffs(r.maps, [*vision, *decoder])) < TOL
    assert np.abs(r.outputs["logits"] - logits).max() < TOL
    # not causal: the first image token looks at the prefix's last token
    assert decoder[0][0, :, 0, ids.shape[1] - 1].min() > 0


def test_batch_of_two_images_with_suffixes(prefix_repo, torch_model):
    """Two images, two prompts with suffixes (the processor's pixel values and ids; token types derived from the
    ids): the prefix bidirectional, the suffix causal, every row's maps as transformers'."""
    m = open_model(prefix_repo, provider="cpu")
    _ = m.tokenizers
    imgs = [Image.fromarray((np.random.default_rng(s).random((32, 32, 3)) * 255).astype(np.uint8)) for s in (5, 6)]
    enc = pm.processor(prefix_repo)(
        text=["<image>a photo", "<image>red dog"], images=imgs, suffix=["the cat", "sat on"], return_tensors="np"
    )
    assert m.family.token_types(enc["input_ids"]).tolist() == enc["token_type_ids"].tolist()
    assert enc["token_type_ids"].sum() == 2 * 3  # each suffix: two words and EOS
    feeds = {k: enc[k] for k in ("pixel_values", "input_ids", "attention_mask")}
    r = m.analyze(feeds=feeds)
    tt = torch.as_tensor(enc["token_type_ids"])
    vision, decoder, logits = pm.reference(torch_model, enc["pixel_values"], enc["input_ids"], token_type_ids=tt)
    assert max(_max_diffs(r.maps, [*vision, *decoder])) < TOL
    assert np.abs(r.outputs["logits"] - logits).max() < TOL


def generate_positions(mask: np.ndarray) -> torch.Tensor:
    """transformers' generate() positions for a padded batch: counted over each row's real tokens (a pad gets 1),
    then PaliGemma's + 1 (prepare_inputs_for_generation; its forward's own arange ignores the padding)."""
    m = torch.as_tensor(mask).long()
    return (m.cumsum(-1) - 1).masked_fill(m == 0, 1) + 1


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("which", ["prefix_repo", "hub_repo"])
def test_padded_batch_of_two_images_with_prompts_of_different_length(request, torch_model, side, which, tmp_path):
    """Two images, prompts of different length, padded by the processor's tokenizer on either side: every map of
    every real row as transformers' eager attention of the padded batch (the prefix decoder with the processor's
    token_type_ids, the Hub's causal one without), and each row's maps as that row alone; each row's image tokens
    placed where that row holds them."""
    repo = request.getfixturevalue(which)
    m = open_model(repo, provider="cpu")
    proc = pm.processor(repo)
    proc.tokenizer.padding_side = side
    imgs = [Image.fromarray((np.random.default_rng(s).random((40, 36, 3)) * 255).astype(np.uint8)) for s in (7, 8)]
    texts = ["<image>a photo of the cat sat on", "<image>red dog"]
    enc = proc(text=texts, images=imgs, return_tensors="np", padding="longest")
    real = enc["attention_mask"].astype(bool)
    assert real.sum(1).tolist() == [pm.N_IMAGE + 9, pm.N_IMAGE + 4]  # BOS, the words, "\n": five pads in row 2
    assert (real[1, -5:] if side == "right" else real[1, :5]).sum() == 0
    assert m.family.token_types(enc["input_ids"])[real].tolist() == enc["token_type_ids"][real].tolist()
    r = m.analyze(feeds={k: enc[k] for k in ("pixel_values", "input_ids", "attention_mask")})
    types = torch.as_tensor(enc["token_type_ids"]) if which == "prefix_repo" else None
    assert r.info.get("fidelity", []) == ([] if types is not None else [NO_PREFIX_MASK])  # the batch says it too
    pos = generate_positions(enc["attention_mask"])
    with torch.no_grad():
        o = torch_model(
            input_ids=torch.as_tensor(enc["input_ids"]),
            pixel_values=torch.as_tensor(enc["pixel_values"]),
            attention_mask=torch.as_tensor(enc["attention_mask"]),
            token_type_ids=types,
            position_ids=pos,
            output_attentions=True,
        )
        vision = torch_model.model.vision_tower(torch.as_tensor(enc["pixel_values"]), output_attentions=True)
    assert max(_max_diffs(r.maps[:2], [a.numpy() for a in vision.attentions])) < TOL
    for got, want in zip(r.maps[2:], o.attentions):
        g, w = got.array(), want.numpy()
        assert g.shape == w.shape
        for b in range(2):  # the real rows over the real keys (a padded query row is no one's attention)
            assert np.abs(g[b][:, real[b]][:, :, real[b]] - w[b][:, real[b]][:, :, real[b]]).max() < TOL
            assert np.abs(g[b][:, real[b]][:, :, ~real[b]]).sum() < 1e-6  # nothing on the pads
    for b in range(2):  # each row as it is alone (no padding)
        ids = enc["input_ids"][b : b + 1, real[b]]
        alone = m.analyze(feeds={"pixel_values": enc["pixel_values"][b : b + 1], "input_ids": ids})
        for got, one in zip(r.maps[2:], alone.maps[2:]):
            assert np.abs(got.array()[b][:, real[b]][:, :, real[b]] - one.array()[0]).max() < TOL
    check_rows_placed(r, enc, o.attentions, tmp_path)


def check_rows_placed(r, enc, attentions, tmp_path) -> None:
    """Image regions of each batch row: a word's row over that row's image tokens (left padding shifts them), as
    transformers' row at the processor's image-token positions; the figure of a row and the .npz say the same."""
    from attnviz.core import io
    from attnviz.core import view as v
    from attnviz.core.rows import pick_row

    for b, word in ((0, "cat"), (1, "dog")):
        blocks = r.blocks(b)
        dec = next(i for i, blk in enumerate(blocks) if blk.stack == "decoder")
        image = np.flatnonzero(enc["input_ids"][b] == pm.IMAGE_TOKEN)
        grid = v.image_source(r, blocks)[1]
        assert [grid.key(*divmod(k, pm.GRID)) for k in range(pm.N_IMAGE)] == image.tolist()
        row = dict(v.image_queries(r, blocks[dec], grid))[word]  # the row that produced the word (words24)
        assert enc["input_ids"][b, row + 1] == pm.vocab()[word]
        ov = v.overlay_view(r, v.Selection(block=dec, batch=b, layer=1, head=2, query=row), blocks=blocks)
        want = attentions[1][b, 2, row].numpy()[image].reshape(pm.GRID, pm.GRID)
        assert np.abs(ov.patch - want).max() < TOL
        one = pick_row(r, b)  # a row taken out (its figure): the row's grid
        assert (
            one.token_grid == grid
            and np.abs(v.overlay_view(one, v.Selection(block=dec, layer=1, head=2, query=row)).patch - want).max() < TOL
        )
    io.save_npz(r, tmp_path / "batch.npz")
    back = io.load_npz(tmp_path / "batch.npz")
    assert [back.token_grid_of(b) for b in range(2)] == [r.token_grid_of(b) for b in range(2)]
    for res in (r, back):
        check_only_real_words_offered(res, enc)


def check_only_real_words_offered(r, enc) -> None:
    """Each row's own tokens are the processor's attention mask's 1s; Image regions offers exactly the row's words
    after its image (none of its pads, on either side), as does that row taken out; the heatmap's rows and
    columns are the row's own tokens."""
    from attnviz.core import view as v
    from attnviz.core.rows import pick_row

    for b in range(2):
        real = np.flatnonzero(enc["attention_mask"][b]).tolist()
        blocks = r.blocks(b)
        dec = next(i for i, blk in enumerate(blocks) if blk.stack == "decoder")
        assert blocks[dec].query_axis.real == real
        grid = v.image_source(r, blocks)[1]
        words = [row for row in real if row >= grid.end]  # BOS, the prompt's words, "\n"
        assert [row for _, row in v.image_queries(r, blocks[dec], grid)] == words
        mv = v.compute_map(r, v.Selection(block=dec, batch=b))
        assert mv.q_pos.tolist() == mv.k_pos.tolist() == real
        one = pick_row(r, b)
        one_dec = one.blocks()[dec]
        assert [row for _, row in v.image_queries(one, one_dec, v.image_source(one, one.blocks())[1])] == words


def test_hub_decoder_is_said_to_be_causal_in_one_line(hub_repo, image, torch_model):
    """The Hub's decoder file cannot take the prefix mask: one line on open and with every run; its maps are what
    transformers computes without token_type_ids (causal), which are not the model's."""
    m = open_model(hub_repo, provider="cpu")
    assert m.describe()["fidelity"] == [NO_PREFIX_MASK] and "\n" not in NO_PREFIX_MASK
    r = m.analyze(text=PROMPT, image=str(image))
    assert r.info["fidelity"] == [NO_PREFIX_MASK]
    prep = bd.prepare(m, AnalyzeRequest(text=PROMPT, image=str(image)))
    px, ids = prep.feeds["pixel_values"], np.asarray(prep.prompts, np.int64)
    vision, causal, logits = pm.reference(torch_model, px, ids)
    assert max(_max_diffs(r.maps, [*vision, *causal])) < TOL
    assert np.abs(r.outputs["logits"] - logits).max() < TOL
    _, model, _ = pm.reference(torch_model, px, ids, token_type_ids=pm.token_types(ids))
    assert max(_max_diffs(r.maps[2:], model)) > 0.1  # why the line is said


@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_equals_transformers_greedy(prefix_repo, image, torch_model, use_cache):
    """--generate through the decoder's cache (generated tokens are suffix: causal) and by re-running the
    sequence: transformers' greedy tokens with the processor's inputs; the steps' maps are the full run's."""
    m = open_model(prefix_repo, provider="cpu")
    r = m.analyze(text=PROMPT, image=str(image), generate=4, use_cache=use_cache)
    want = pm.processor(prefix_repo)(text=PROMPT, images=Image.open(image).convert("RGB"), return_tensors="pt")
    with torch.no_grad():
        out = torch_model.generate(**want, max_new_tokens=4, do_sample=False, eos_token_id=None)
    n = want["input_ids"].shape[1]
    assert r.info["generated_ids"] == out[0, n:].tolist()
    assert r.info["generation"] == ("kv-cache" if use_cache else "full re-run")
    full = out[:, :-1]
    vision, decoder, _ = pm.reference(torch_model, want["pixel_values"], full, token_type_ids=pm.token_types(full, [n]))
    assert max(_max_diffs(r.maps, [*vision, *decoder])) < TOL


def test_image_columns_labelled_with_the_patch_torch_puts_there(prefix_repo, image, torch_model):
    """Hand-built: an image bright in one patch only changes exactly one of SigLIP's patch embeddings; the
    decoder's column of that image token is labelled with that patch's row and column, and the result's grid
    puts it there."""
    from attnviz.core.attention import PatchGrid

    m = open_model(prefix_repo, provider="cpu")
    r = m.analyze(text=PROMPT, image=str(image))
    keys = r.blocks()[-1].key_axis.labels
    assert r.token_grid == PatchGrid(pm.GRID, pm.GRID, 0)
    conv = torch_model.model.vision_tower.embeddings.patch_embedding
    base = torch.zeros(1, 3, pm.IMAGE, pm.IMAGE)
    for row in range(pm.GRID):
        for col in range(pm.GRID):
            px = base.clone()
            px[..., row * pm.PATCH : (row + 1) * pm.PATCH, col * pm.PATCH : (col + 1) * pm.PATCH] = 1.0
            with torch.no_grad():  # as SiglipVisionEmbeddings: conv, flatten(2), transpose -> [B, patches, dim]
                diff = (conv(px) - conv(base)).flatten(2).transpose(1, 2)[0].abs().sum(-1)
            k = int(torch.nonzero(diff).flatten().item())
            assert keys[k] == f"({row},{col})"
    assert keys[pm.N_IMAGE :] == ["<bos>", *"a photo of the cat".split(), "\n"]


def test_hub_decoder_generates_transformers_causal_tokens(hub_repo, image, torch_model):
    """The Hub-layout decoder's greedy tokens are transformers' without token_type_ids (what the file can do),
    with its one line."""
    m = open_model(hub_repo, provider="cpu")
    r = m.analyze(text=PROMPT, image=str(image), generate=4)
    want = pm.processor(hub_repo)(text=PROMPT, images=Image.open(image).convert("RGB"), return_tensors="pt")
    with torch.no_grad():
        out = torch_model.generate(
            input_ids=want["input_ids"],
            pixel_values=want["pixel_values"],
            attention_mask=want["attention_mask"],
            max_new_tokens=4,
            do_sample=False,
            eos_token_id=None,
        )
    assert r.info["generated_ids"] == out[0, want["input_ids"].shape[1] :].tolist()
    assert NO_PREFIX_MASK in r.info["notes"]


def test_config_files_that_do_not_belong_together_are_one_line(prefix_repo, tmp_path):
    import json
    import shutil

    from attnviz import AttnvizError

    repo = tmp_path / "repo"
    shutil.copytree(prefix_repo, repo)
    pre = json.loads((repo / "preprocessor_config.json").read_text())
    (repo / "preprocessor_config.json").write_text(json.dumps(pre | {"image_seq_length": pm.N_IMAGE + 1}))
    with pytest.raises(AttnvizError, match=f"expands <image> to {pm.N_IMAGE + 1} tokens.*{pm.N_IMAGE} patches"):
        open_model(repo, provider="cpu")
    cfg = json.loads((repo / "config.json").read_text())
    (repo / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if k != "vision_config"}))
    with pytest.raises(AttnvizError, match="no vision_config"):
        open_model(repo, provider="cpu")


def test_image_regions_show_a_word_over_the_image(prefix_repo, image, torch_model):
    """Image regions (and its figure, the same view model): a prefix word's row over the image tokens, placed on
    the patch grid, is transformers' eager row."""
    from attnviz.core import view as v

    m = open_model(prefix_repo, provider="cpu")
    r = m.analyze(text=PROMPT, image=str(image))
    blocks = r.blocks()
    dec = next(i for i, b in enumerate(blocks) if b.stack == "decoder")
    assert v.image_source(r, blocks)[:2] == (dec, r.token_grid)
    row = dict(v.image_queries(r, blocks[dec], r.token_grid))["cat"]
    prep = bd.prepare(m, AnalyzeRequest(text=PROMPT, image=str(image)))
    ids = np.asarray(prep.prompts, np.int64)
    _, decoder, _ = pm.reference(torch_model, prep.feeds["pixel_values"], ids, token_type_ids=pm.token_types(ids))
    for layer, head in ((0, 1), (1, 3)):
        ov = v.overlay_view(r, v.Selection(block=dec, layer=layer, head=head, query=row))
        want = decoder[layer][0, head, row, : pm.N_IMAGE].reshape(pm.GRID, pm.GRID)
        assert ov.query_label == "cat" and np.abs(ov.patch - want).max() < TOL


def test_two_placeholders_are_one_line_naming_the_familys_own(prefix_repo, image):
    """More image tokens than the image's features: one line naming PaliGemma's placeholder (and that the
    processor puts it in front when the prompt has none)."""
    from attnviz import AttnvizError

    m = open_model(prefix_repo, provider="cpu")
    with pytest.raises(AttnvizError, match=f"{2 * pm.N_IMAGE} image tokens and the image gives {pm.N_IMAGE}") as e:
        m.analyze(text="<image><image>a photo", image=str(image))
    assert "write <image> once in the text" in str(e.value) and "or leave it out" in str(e.value)
    assert "\n" not in str(e.value)


def test_extract_prints_newline_tokens_visibly_on_one_line(prefix_repo, tmp_path, capsys):
    """The tiny PaliGemma generates "\\n" tokens: `extract` printed "generated: " and then blank lines, naming none
    (session 20, running the README's commands).  Each token is one word on the one line, newlines drawn as ↵."""
    from attnviz.cli import main

    out = tmp_path / "pg.npz"
    sample = Path(__file__).resolve().parents[2] / "resources" / "samples" / "captioning.png"
    argv = ["extract", str(prefix_repo), "--image", str(sample), "--text", PROMPT, "--generate", "3", "--out", str(out)]
    assert main(argv) == 0
    stdout = capsys.readouterr().out
    generated = np.load(out)["generated"].tolist()  # the tokens themselves, as the file keeps them
    assert len(generated) == 3 and "\n" in generated  # what this test is about: the model does generate a newline
    lines = stdout.splitlines()
    assert all(line.strip() for line in lines), stdout  # no empty line
    [line] = [line for line in lines if line.startswith("generated: ")]
    assert line.removeprefix("generated: ").split(" ") == ["↵" if t == "\n" else t for t in generated]
