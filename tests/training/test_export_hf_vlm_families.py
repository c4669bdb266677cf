"""``attnviz export-hf`` on Idefics3 / SmolVLM, PaliGemma, Qwen2-VL and Qwen2.5-VL folders (issue 22 item 6): each writes the
Hub's three-file layout that attnviz opens as one vision–language model, and every map it shows on an image and a
prompt equals transformers' eager attention of the whole model on the same weights; greedy tokens through the
exported decoder's cache equal transformers' ``generate``.

The sources are the seeded tiny models of tests/idefics3_models.py, paligemma_models.py, qwen2vl_models.py and
qwen25vl_models.py (their ``build()``, tokenizer and image processor, which the runtime's tests use too) saved with
``save_pretrained`` as a Hub download holds them.  The references are transformers' own processors (Idefics3Processor,
PaliGemmaProcessor, Qwen2-VL's image processor and expansion) and ``output_attentions`` / ``generate`` of the model
loaded back from the source folder; attnviz is fed what those processors make, or its own processing of an image
file whose ids and pixels are compared with theirs first.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import idefics3_models as im  # noqa: E402
import onnx  # noqa: E402
import paligemma_models as pm  # noqa: E402
import qwen2vl_models as qm  # noqa: E402
import qwen25vl_models as q5  # noqa: E402
from PIL import Image  # noqa: E402

from attnviz.cli import main  # noqa: E402
from attnviz.runtime import builders as bd  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402
from attnviz.runtime.request import AnalyzeRequest  # noqa: E402
from attnviz.runtime.vlm import VLMSet  # noqa: E402

TOL = 5e-4


def picture(h: int, w: int, seed: int = 3) -> Image.Image:
    return Image.fromarray((np.random.default_rng(seed).random((h, w, 3)) * 255).astype(np.uint8))


def export(tmp_path_factory, name: str, module, cls: str, preprocessor: dict | None = None, processor=None):
    """Save the builder's model, tokenizer and image processor as a Hub download's folder, export-hf it, and load
    the source back in transformers (eager): (exported folder, attnviz's model, transformers' model)."""
    src = tmp_path_factory.mktemp(f"{name}-src") / f"tiny-{name}"
    module.build().save_pretrained(str(src))
    module.tokenizer().save_pretrained(str(src))
    module.image_processor().save_pretrained(str(src))
    if preprocessor:  # what the Hub's preprocessor_config.json adds (PaliGemma's image_seq_length)
        pre = json.loads((src / "preprocessor_config.json").read_text())
        (src / "preprocessor_config.json").write_text(json.dumps(pre | preprocessor))
    if processor:  # processor_config.json (Idefics3's image_seq_len)
        (src / "processor_config.json").write_text(json.dumps(processor))
    out = tmp_path_factory.mktemp(f"{name}-export") / f"tiny-{name}-onnx"
    assert main(["export-hf", str(src), "--out", str(out)]) == 0
    hf = getattr(transformers, cls).from_pretrained(str(src), attn_implementation="eager").eval()
    hf.set_attn_implementation("eager")
    m = open_model(out, provider="cpu")
    assert isinstance(m, VLMSet) and m.name == f"tiny-{name}-onnx"
    assert sorted(p.name for p in (out / "onnx").iterdir()) == [
        "decoder_model_merged.onnx",
        "embed_tokens.onnx",
        "vision_encoder.onnx",
    ]
    assert {"config.json", "preprocessor_config.json", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    return out, m, hf


def inputs_of(out, name: str) -> list[str]:
    return [i.name for i in onnx.load(out / "onnx" / name, load_external_data=False).graph.input]


def max_diff(got, want) -> float:
    assert got.shape == want.shape, (got.shape, want.shape)
    return float(np.abs(got - want).max())


def greedy(hf, kw: dict, n: int) -> list[int]:
    with torch.no_grad():
        out = hf.generate(**kw, max_new_tokens=n, do_sample=False, eos_token_id=None)
    return out[0, kw["input_ids"].shape[1] :].tolist()


# --------------------------------------------------------------------------- Idefics3 / SmolVLM
@pytest.fixture(scope="module")
def idefics3(tmp_path_factory):
    return export(
        tmp_path_factory, "idefics3", im, "Idefics3ForConditionalGeneration", processor={"image_seq_len": im.N_TILE}
    )


def test_idefics3_tiles_and_every_map_equal_transformers(idefics3):
    """An image split into 1 x 2 tiles and the global image by transformers' Idefics3Processor (from the exported
    folder's files): each frame's vision maps on the diagonal of attnviz's vision block, every decoder map and the
    logits as the eager model's."""
    out, m, hf = idefics3
    assert inputs_of(out, "vision_encoder.onnx") == ["pixel_values", "pixel_attention_mask"]
    enc = im.processor(out)(
        text=["<s> <image> a photo of the cat"], images=[[picture(40, 100)]], return_tensors="np", padding=True
    )
    frames = enc["pixel_values"].shape[1]
    assert frames == 3  # two tiles and the global image
    r = m.analyze(feeds={k: enc[k] for k in ("pixel_values", "input_ids", "attention_mask")})
    vision, decoder, logits = im.reference(hf, enc)
    p = vision[0].shape[-1]
    for got, want in zip(r.maps[: im.LAYERS], vision):
        a = got.array()
        assert a.shape == (1, im.HEADS, frames * p, frames * p)
        for t in range(frames):  # each frame's patches among themselves, as the tower runs them
            assert max_diff(a[0, :, t * p : (t + 1) * p, t * p : (t + 1) * p], want[t]) < TOL
        assert a.sum(-1) == pytest.approx(1.0, abs=1e-5)  # no weight off the diagonal blocks
    assert len(r.maps) == 2 * im.LAYERS
    assert max(max_diff(g.array(), w) for g, w in zip(r.maps[im.LAYERS :], decoder)) < TOL
    assert max_diff(r.outputs["logits"], logits) < TOL


def test_idefics3_greedy_tokens_equal_transformers(idefics3):
    out, m, hf = idefics3
    enc = im.processor(out)(text=["<s> <image> a photo"], images=[[picture(40, 100)]], return_tensors="np")
    feeds = {k: enc[k] for k in ("pixel_values", "input_ids", "attention_mask")}
    m.meta["special"] = {k: v for k, v in m.meta["special"].items() if k != "eos"}  # n tokens exactly
    got = m.analyze(feeds=feeds, generate=5).info["generated_ids"]
    kw = {k: torch.as_tensor(v) for k, v in enc.items()}
    assert got == greedy(hf, kw, 5) and len(got) == 5


# --------------------------------------------------------------------------- PaliGemma
@pytest.fixture(scope="module")
def paligemma(tmp_path_factory):
    return export(
        tmp_path_factory,
        "paligemma",
        pm,
        "PaliGemmaForConditionalGeneration",
        preprocessor={"image_seq_length": pm.N_IMAGE},
    )


def test_paligemma_prefix_mask_and_every_map_equal_transformers(paligemma):
    """The exported decoder takes token_type_ids (the model's prefix mask, not the language model's causal one):
    no fidelity line, and with PaliGemmaProcessor's ids (a prefix and a suffix) every map and the logits equal the
    eager model's given the processor's token types."""
    out, m, hf = paligemma
    assert inputs_of(out, "decoder_model_merged.onnx")[:4] == [
        "inputs_embeds",
        "attention_mask",
        "position_ids",
        "token_type_ids",
    ]
    assert not m.describe()["fidelity"]
    enc = pm.processor(out)(text="<image>a photo of", images=picture(40, 36), suffix="the cat", return_tensors="np")
    r = m.analyze(feeds={k: enc[k] for k in ("pixel_values", "input_ids", "attention_mask")})
    vision, decoder, logits = pm.reference(
        hf, enc["pixel_values"], enc["input_ids"], token_type_ids=torch.as_tensor(enc["token_type_ids"])
    )
    assert len(r.maps) == len(vision) + len(decoder) == 2 * pm.LAYERS
    assert max(max_diff(g.array(), w) for g, w in zip(r.maps, [*vision, *decoder])) < TOL
    assert max_diff(r.outputs["logits"], logits) < TOL
    prefix = int((enc["token_type_ids"][0] == 0).sum())
    assert decoder[0][0, :, 0, prefix - 1].min() > 0  # not causal: the first image token sees the prefix's end
    assert np.abs(decoder[0][0, :, prefix - 1, prefix:]).max() == 0  # the suffix is hidden from the prefix


def test_paligemma_greedy_tokens_equal_transformers(paligemma, tmp_path):
    """A typed prompt and an image file (attnviz's processing, equal to PaliGemmaProcessor's): greedy tokens through
    the exported decoder's cache (generated tokens are suffix: causal) equal transformers'."""
    out, m, hf = paligemma
    path = tmp_path / "photo.png"
    picture(48, 40).save(path)
    prompt = "<image>caption the cat"
    want = pm.processor(out)(text=prompt, images=Image.open(path).convert("RGB"), return_tensors="pt")
    prep = bd.prepare(m, AnalyzeRequest(text=prompt, image=str(path)))
    assert prep.prompts == want["input_ids"].tolist()
    assert max_diff(prep.feeds["pixel_values"], want["pixel_values"].numpy()) < 1e-4
    m.meta["special"] = {k: v for k, v in m.meta["special"].items() if k != "eos"}
    got = m.analyze(text=prompt, image=str(path), generate=5).info["generated_ids"]
    assert got == greedy(hf, dict(want), 5) and len(got) == 5


# --------------------------------------------------------------------------- Qwen2-VL
@pytest.fixture(scope="module")
def qwen2vl(tmp_path_factory):
    return export(tmp_path_factory, "qwen2vl", qm, "Qwen2VLForConditionalGeneration")


def _qwen_generate_inputs(hf, px, grid, ids) -> dict:
    """What transformers' Qwen2-VL / Qwen2.5-VL ``generate`` takes for one image and prompt (its M-RoPE deltas
    recomputed from the prompt)."""
    t = torch.as_tensor(ids)
    hf.model.rope_deltas = None
    return dict(
        input_ids=t,
        pixel_values=torch.as_tensor(px),
        image_grid_thw=torch.as_tensor(grid),
        mm_token_type_ids=qm.image_types(t),
        attention_mask=torch.ones_like(t),
    )


def test_qwen2vl_every_map_and_greedy_tokens_equal_transformers(qwen2vl, tmp_path):
    """An image file of another size than the export was traced on (45 x 70 -> 48 x 64: 3 x 4 image tokens):
    attnviz's patches and ids are transformers' image processor's and Qwen2VLProcessor's expansion, every vision
    and decoder map (M-RoPE positions) and the logits equal the eager model's, and greedy tokens through the cache
    (positions continuing with the rope delta) equal transformers' generate."""
    out, m, hf = qwen2vl
    assert inputs_of(out, "vision_encoder.onnx") == ["pixel_values", "image_grid_thw"]
    path = tmp_path / "photo.png"
    picture(45, 70).save(path)
    prompt = "<|vision_start|><|image_pad|><|vision_end|>describe the cat"
    proc = qm.image_processor()(images=Image.open(path).convert("RGB"), return_tensors="np")
    px, grid = proc["pixel_values"], proc["image_grid_thw"]
    assert grid.tolist() == [[1, 6, 8]]
    ids = np.asarray([qm.tokenizer()(qm.expand(prompt, grid))["input_ids"]], np.int64)
    assert bd.prepare(m, AnalyzeRequest(text=prompt, image=str(path))).prompts == ids.tolist()
    r = m.analyze(text=prompt, image=str(path))
    vision = qm.record_vision_attention(hf, px, grid)
    _, decoder, logits = qm.reference(hf, px, grid, ids)
    assert len(r.maps) == len(vision) + len(decoder) == 2 * qm.LAYERS
    assert max(max_diff(g.array(), w) for g, w in zip(r.maps, [*vision, *decoder])) < TOL
    assert max_diff(r.outputs["logits"], logits) < TOL
    m.meta["special"] = {k: v for k, v in m.meta["special"].items() if k != "eos"}
    got = m.analyze(text=prompt, image=str(path), generate=5).info["generated_ids"]
    assert got == greedy(hf, _qwen_generate_inputs(hf, px, grid, ids), 5) and len(got) == 5


# --------------------------------------------------------------------------- Qwen2.5-VL
@pytest.fixture(scope="module")
def qwen25vl(tmp_path_factory):
    # Qwen2.5-VL's text side and image processor are Qwen2-VL's: the tiny model's tokenizer and processor
    source = SimpleNamespace(build=q5.build, tokenizer=qm.tokenizer, image_processor=qm.image_processor)
    return export(tmp_path_factory, "qwen25vl", source, "Qwen2_5_VLForConditionalGeneration")


def test_qwen25vl_windowed_blocks_every_map_and_greedy_tokens_equal_transformers(qwen25vl, tmp_path):
    """The export (traced on 10 x 6 patches) opens with its windowed blocks labelled; on an image file of another
    size (45 x 70 -> 6 x 8 patches: 3 x 4 merge units, so 2 x 2, 2 x 2, 1 x 2 and 1 x 2 windows) every vision map
    -- windowed and full blocks, keys in transformers' window order -- every decoder map and the logits equal the
    eager model's, and greedy tokens through the cache equal transformers' generate."""
    out, m, hf = qwen25vl
    assert inputs_of(out, "vision_encoder.onnx") == ["pixel_values", "image_grid_thw"]
    assert [s.label for s in m.sites] == [
        "encoder self L0 [32-px windows]",
        "encoder self L1",  # fullatt_block_indexes: the whole image
        "encoder self L2 [32-px windows]",
        "decoder self L0",
        "decoder self L1",
    ]
    path = tmp_path / "photo.png"
    picture(45, 70).save(path)
    prompt = "<|vision_start|><|image_pad|><|vision_end|>describe the cat"
    proc = qm.image_processor()(images=Image.open(path).convert("RGB"), return_tensors="np")
    px, grid = proc["pixel_values"], proc["image_grid_thw"]
    assert grid.tolist() == [[1, 6, 8]]
    ids = np.asarray([qm.tokenizer()(qm.expand(prompt, grid))["input_ids"]], np.int64)
    assert bd.prepare(m, AnalyzeRequest(text=prompt, image=str(path))).prompts == ids.tolist()
    r = m.analyze(text=prompt, image=str(path))
    vision, _ = q5.vision_reference(hf, px, grid)
    _, decoder, logits = qm.reference(hf, px, grid, ids)
    got = [a.array() for a in r.maps]
    assert len(got) == len(vision) + len(decoder) == q5.DEPTH + q5.LAYERS
    assert max(max_diff(g, w) for g, w in zip(got, [*vision, *decoder])) < TOL
    assert max_diff(r.outputs["logits"], logits) < TOL
    # the windowed blocks do attend within windows (so the comparison above tells them from the full one)
    assert (got[0] == 0).mean() > 0.3 and (got[1] == 0).mean() == 0
    m.meta["special"] = {k: v for k, v in m.meta["special"].items() if k != "eos"}
    generated = m.analyze(text=prompt, image=str(path), generate=5).info["generated_ids"]
    assert generated == greedy(hf, _qwen_generate_inputs(hf, px, grid, ids), 5) and len(generated) == 5
