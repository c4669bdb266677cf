"""``attnviz export-hf`` on a LLaVA folder (issue 22 item 6): the Hub's three-file layout in OUT/onnx/ with the
repository's files at OUT's top, which attnviz opens as one vision–language model whose every map, logits and greedy
tokens equal transformers' eager model on the same weights; nothing written when a check or the family fails.

The source is the seeded tiny LLaVA of tests/vlm_models.py saved the way the Hub keeps a model
(``save_pretrained`` of the model, its tokenizer and its image processor); the references are transformers' own
``LlavaProcessor``, ``output_attentions`` and ``generate`` on the weights loaded back from that folder.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import vlm_models as vm  # noqa: E402
from PIL import Image  # noqa: E402

from attnviz.cli import main  # noqa: E402
from attnviz.runtime import builders as bd  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402
from attnviz.runtime.request import AnalyzeRequest  # noqa: E402
from attnviz.runtime.vlm import VLMSet  # noqa: E402
from attnviz.training.hf_vlm_families import base as vlm_base  # noqa: E402
from attnviz.training.hf_vlm_families import llava as vlm_llava  # noqa: E402

TOL = 5e-4
PROMPT = "<s> <image> a photo of the cat"


def save_source(folder):
    """The model, tokenizer and CLIP image processor as save_pretrained writes them (a Hub download's files)."""
    vm.build().save_pretrained(str(folder))
    vm.tokenizer().save_pretrained(str(folder))
    size = {"height": vm.IMAGE, "width": vm.IMAGE}
    transformers.CLIPImageProcessor(
        size=size, crop_size=size, do_center_crop=False, image_mean=vm.MEAN, image_std=vm.STD
    ).save_pretrained(str(folder))
    return folder


def digest(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    src = save_source(tmp_path_factory.mktemp("llava-src") / "tiny-llava")
    before = digest(src)
    out = tmp_path_factory.mktemp("llava-export") / "tiny-llava-onnx"
    assert main(["export-hf", str(src), "--out", str(out)]) == 0
    hf = transformers.LlavaForConditionalGeneration.from_pretrained(str(src), attn_implementation="eager").eval()
    return src, before, out, hf


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    p = tmp_path_factory.mktemp("img") / "photo.png"
    Image.fromarray((np.random.default_rng(3).random((48, 40, 3)) * 255).astype(np.uint8)).save(p)
    return p


def processor(repo):
    """transformers' LlavaProcessor from the exported repository's own files."""
    return transformers.LlavaProcessor(
        image_processor=transformers.CLIPImageProcessor.from_pretrained(str(repo)),
        tokenizer=transformers.PreTrainedTokenizerFast.from_pretrained(str(repo)),
        patch_size=vm.PATCH,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
    )


def reference(hf, pixel_values, input_ids):
    """Eager maps: the vision layers the features read (vision_feature_layer -2: the first of two), then the whole
    model's decoder self-attention, and the logits."""
    px, ids = torch.as_tensor(pixel_values), torch.as_tensor(input_ids)
    with torch.no_grad():
        v = hf.model.vision_tower(px, output_attentions=True)
        o = hf(input_ids=ids, pixel_values=px, attention_mask=torch.ones_like(ids), output_attentions=True)
    return [v.attentions[0].numpy(), *(a.numpy() for a in o.attentions)], o.logits.numpy()


def test_the_export_is_the_hub_layout_and_one_model(exported):
    import onnx

    src, before, out, _ = exported
    top = {p.name for p in out.iterdir()}
    assert {"config.json", "preprocessor_config.json", "tokenizer.json", "generation_config.json", "onnx"} <= top
    assert not any(n.endswith(".onnx") for n in top)
    assert sorted(p.name for p in (out / "onnx").iterdir()) == [
        "decoder_model_merged.onnx",
        "embed_tokens.onnx",
        "vision_encoder.onnx",
    ]
    dec = onnx.load(out / "onnx" / "decoder_model_merged.onnx", load_external_data=False)
    past = [f"past_key_values.{i}.{w}" for i in range(vm.LAYERS) for w in ("key", "value")]
    assert [i.name for i in dec.graph.input] == ["inputs_embeds", "attention_mask", "position_ids", *past]
    assert [o.name for o in dec.graph.output] == ["logits", *(p.replace("past_key_values", "present") for p in past)]
    vis = onnx.load(out / "onnx" / "vision_encoder.onnx", load_external_data=False)
    assert [i.name for i in vis.graph.input] == ["pixel_values"]
    assert [o.name for o in vis.graph.output] == ["image_features"]
    assert dec.producer_name == "attnviz export-hf"
    for name in ("repo", "onnx"):
        m = open_model(out if name == "repo" else out / "onnx", provider="cpu")
        assert isinstance(m, VLMSet) and m.name == "tiny-llava-onnx"
        assert [(s.stack, s.layer) for s in m.sites] == [("encoder", 0), ("decoder", 0), ("decoder", 1)]
    assert digest(src) == before  # the source folder: the same files, byte for byte


def test_every_map_equals_transformers_on_a_batch_of_two_images(exported):
    """Two images and two prompts through transformers' own processor (from the exported files): every map and the
    logits of the export equal the eager model's on the source weights."""
    _, _, out, hf = exported
    imgs = [Image.fromarray((np.random.default_rng(s).random((40, 36, 3)) * 255).astype(np.uint8)) for s in (5, 6)]
    enc = processor(out)(text=["<image> a cat", "red <image> dog"], images=imgs, return_tensors="np")
    feeds = {k: enc[k] for k in ("pixel_values", "input_ids", "attention_mask")}
    r = open_model(out, provider="cpu").analyze(feeds=feeds)
    ref, logits = reference(hf, enc["pixel_values"], enc["input_ids"])
    assert len(r.maps) == len(ref) == 1 + vm.LAYERS
    for got, want in zip(r.maps, ref):
        assert got.shape == want.shape and got.shape[0] == 2
        assert np.abs(got.array() - want).max() < TOL
    assert np.abs(r.outputs["logits"] - logits).max() < TOL


def test_a_typed_caption_and_greedy_tokens_equal_transformers(exported, image):
    """The user's path: an image file and a prompt with <image>; teacher-forced maps as transformers', and greedy
    generation through the exported decoder's cache makes transformers' tokens."""
    _, _, out, hf = exported
    m = open_model(out, provider="cpu")
    prep = bd.prepare(m, AnalyzeRequest(text=PROMPT, image=str(image)))
    px, ids = prep.feeds["pixel_values"], np.asarray(prep.prompts, np.int64)
    assert (ids == vm.IMAGE_TOKEN).sum() == vm.N_IMAGE
    r = m.analyze(text=PROMPT, image=str(image))
    ref, _ = reference(hf, px, ids)
    for got, want in zip(r.maps, ref):
        assert np.abs(got.array() - want).max() < TOL
    n = 6
    m.meta["special"] = {k: v for k, v in m.meta["special"].items() if k != "eos"}  # n tokens exactly
    g = m.analyze(text=PROMPT, image=str(image), generate=n).info["generated_ids"]
    with torch.no_grad():
        t = torch.as_tensor(ids)
        want_ids = hf.generate(
            input_ids=t,
            pixel_values=torch.as_tensor(px),
            attention_mask=torch.ones_like(t),
            max_new_tokens=n,
            do_sample=False,
            eos_token_id=None,
        )[0, t.shape[1] :].tolist()
    assert g == want_ids and len(g) == n


def _cli_error(capsys, args) -> str:
    capsys.readouterr()  # what building the source printed (transformers' progress bars)
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_another_vlm_family_is_one_line_and_writes_nothing(tmp_path, capsys):
    """LLaVA-NeXT (any-resolution tiles, not a family export-hf has a recipe for): refused in one line naming its type
    and the families written, before the weights load; nothing written, the source untouched."""
    T = transformers
    cfg = T.LlavaNextConfig(
        vision_config=T.CLIPVisionConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
        ),
        text_config=T.LlamaConfig(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
        ),
        image_grid_pinpoints=[[32, 32]],
    )
    src = tmp_path / "tiny-llava-next"
    T.LlavaNextForConditionalGeneration(cfg).save_pretrained(str(src))
    before = digest(src)
    err = _cli_error(capsys, ["export-hf", str(src), "--out", str(tmp_path / "out")])
    assert "'llava_next'" in err and "llava, idefics3, paligemma, qwen2_vl, qwen2_5_vl only" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny-llava-next"] and digest(src) == before


def test_a_llava_without_its_image_processor_is_one_line(tmp_path, capsys):
    src = save_source(tmp_path / "tiny-llava")
    (src / "preprocessor_config.json").unlink()
    err = _cli_error(capsys, ["export-hf", str(src), "--out", str(tmp_path / "out")])
    assert "preprocessor_config.json" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny-llava"]


def test_an_export_that_differs_from_transformers_is_not_published(tmp_path, capsys, monkeypatch):
    """A decoder traced on embeddings scaled by 1.5 (a wrong export whose inputs and outputs look right): the check
    finds its maps off and refuses in one line; no OUT folder, no staging folder left."""
    src = save_source(tmp_path / "tiny-llava")
    forward = vlm_base.Decoder.forward
    monkeypatch.setattr(vlm_base.Decoder, "forward", lambda self, e, *rest: forward(self, e * 1.5, *rest))
    err = _cli_error(capsys, ["export-hf", str(src), "--out", str(tmp_path / "out")])
    assert "export check failed: maps differ from transformers" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny-llava"]


def test_an_operator_torch_cannot_export_is_one_line(tmp_path, capsys, monkeypatch):
    """An image tower that counts with ``torch.histc`` (as Qwen3-MoE's routing does): torch runs it, its ONNX
    exporter has no form for it; export-hf names the operator in one line and writes nothing."""
    src = save_source(tmp_path / "tiny-llava")
    forward = vlm_llava.LlavaVision.forward

    def with_histc(self, pixel_values):
        return forward(self, pixel_values) + 0 * torch.histc(pixel_values, bins=4).sum()

    monkeypatch.setattr(vlm_llava.LlavaVision, "forward", with_histc)
    err = _cli_error(capsys, ["export-hf", str(src), "--out", str(tmp_path / "out")])
    assert (
        "LlavaForConditionalGeneration (onnx/vision_encoder.onnx): torch cannot export the operator aten::histc" in err
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny-llava"]
