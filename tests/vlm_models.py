"""A tiny random-init LLaVA (CLIP-ViT vision tower + Llama decoder) saved as a Hub repository and exported to the
Hub's three-file ONNX layout (``REPO/onnx/vision_encoder.onnx``, ``embed_tokens.onnx``,
``decoder_model_merged.onnx``; config, preprocessor and tokenizer at ``REPO/``), with its eager reference maps.

``decoder_model_merged.onnx`` comes in both forms found on the Hub: ``merged=True`` (the default) exports a
without-past and a with-past decoder and merges them as optimum's ``merge_decoders`` does (:func:`merge_decoders`:
one ``If`` on ``use_cache_branch``, the with-past graph its then-branch, the without-past graph its else-branch,
initializers deduplicated by content into the outer graph, node and tensor names left as exported, so both
branches hold the same names); ``merged=False`` writes the with-past decoder alone under the merged name (fed an
empty past it is the first step), as some onnx-community exports do.
"""

from __future__ import annotations

from pathlib import Path

import vlm_build as vb

torch = __import__("pytest").importorskip("torch")
transformers = __import__("pytest").importorskip("transformers")

IMAGE, PATCH = 32, 8
GRID = IMAGE // PATCH  # 4 x 4 patches; the CLS token is dropped ("default" feature select strategy)
N_IMAGE = GRID * GRID
LAYERS, HEADS, HIDDEN = 2, 4, 32
WORDS = "a photo of the cat sat on mat dog red blue green image shows where looks".split()
SPECIALS = ["<pad>", "<unk>", "<s>", "</s>", "<image>"]
VOCAB_SIZE = 64
IMAGE_TOKEN = SPECIALS.index("<image>")
MEAN, STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]  # CLIP's


def vocab() -> dict[str, int]:
    return vb.word_vocab(SPECIALS, WORDS, VOCAB_SIZE)


def build():
    """The seeded tiny LlavaForConditionalGeneration (eager attention everywhere)."""
    T = transformers
    torch.manual_seed(0)
    vision = T.CLIPVisionConfig(
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        image_size=IMAGE,
        patch_size=PATCH,
        projection_dim=HIDDEN,
    )
    text = T.LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=2,
        eos_token_id=3,
        pad_token_id=0,
    )
    cfg = T.LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=IMAGE_TOKEN,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        image_seq_length=N_IMAGE,
    )
    m = T.LlavaForConditionalGeneration(cfg)
    m.set_attn_implementation("eager")
    m.config.use_cache = False
    return m.eval()


def tokenizer():
    return vb.word_tokenizer(
        vocab(), "<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>", additional_special_tokens=["<image>"]
    )


class _Vision(torch.nn.Module):
    """pixel_values -> image_features (the projector's output for the chosen layer, CLS dropped)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, pixel_values):
        # as LlavaModel.get_image_features: the chosen layer's states, CLS dropped, through the projector
        cfg = self.m.config
        out = self.m.model.vision_tower(pixel_values, output_hidden_states=True)
        states = out.hidden_states[cfg.vision_feature_layer][:, 1:]
        return self.m.model.multi_modal_projector(states)


_Embed = vb.Embed  # the names other test modules use
merge_decoders = vb.merge_decoders


def _Decoder(m):
    """inputs_embeds, attention_mask, position_ids, past key/values -> logits, present key/values.  LLaVA's
    decoder is model.language_model, Idefics3's model.text_model (tests/idefics3_models.py)."""
    lm = getattr(m.model, "language_model", None) or m.model.text_model
    return vb.CachedDecoder(lm, m.lm_head, lm.config, lm.config.num_hidden_layers)


def save_repo(repo: Path, merged: bool = True) -> Path:
    """The Hub repository: config.json, preprocessor_config.json, tokenizer at REPO/, the three ONNX files in
    REPO/onnx/."""
    m = build()
    processor = transformers.CLIPImageProcessor(
        size={"height": IMAGE, "width": IMAGE},
        crop_size={"height": IMAGE, "width": IMAGE},
        do_center_crop=False,
        image_mean=MEAN,
        image_std=STD,
    )
    # image_seq_length: LlavaProcessor's patch count (num_image_tokens)
    onnx_dir = vb.start_repo(repo, m, tokenizer(), processor, image_seq_length=N_IMAGE)
    px = torch.randn(1, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(1))
    ids = torch.tensor([[2, 5, 6, 7]])
    batch = {0: "batch"}
    vb.export_vision(_Vision(m), (px,), onnx_dir, ["pixel_values"], {"pixel_values": batch, "image_features": batch})
    vb.export_embed(m, ids, onnx_dir)
    if merged:
        vb.export_merged_decoder(lambda path, past: _export_decoder(m, ids, path, with_past=past), onnx_dir)
    else:
        _export_decoder(m, ids, onnx_dir / "decoder_model_merged.onnx", with_past=True)
    return Path(repo)


def _export_decoder(m, ids, path: Path, with_past: bool, layers: int = LAYERS) -> None:
    """The decoder alone: inputs_embeds, attention_mask, position_ids (and past key/values when ``with_past``) ->
    logits and present key/values, as optimum's decoder_model.onnx / decoder_with_past_model.onnx."""
    emb, mask, pos = vb.decoder_example(m, ids, with_past)
    seq = {0: "batch", 1: "seq"}
    inputs = {
        "inputs_embeds": (emb, seq),
        "attention_mask": (mask, {0: "batch", 1: "total"}),
        "position_ids": (pos, seq),
    }
    kv = m.config.text_config.num_key_value_heads
    vb.export_decoder(_Decoder(m), path, inputs, with_past, layers, kv, HIDDEN // HEADS)


def reference(m, pixel_values, input_ids):
    """transformers' eager maps: the vision tower's every layer, then the decoder's (LlavaForConditionalGeneration
    on the same image and expanded prompt), and the logits."""
    with torch.no_grad():
        v = m.model.vision_tower(torch.as_tensor(pixel_values), output_attentions=True)
        o = m(
            input_ids=torch.as_tensor(input_ids),
            pixel_values=torch.as_tensor(pixel_values),
            attention_mask=torch.ones(input_ids.shape, dtype=torch.int64),
            output_attentions=True,
        )
    return [a.numpy() for a in v.attentions], [a.numpy() for a in o.attentions], o.logits.numpy()
