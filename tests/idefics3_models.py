"""A tiny random-init Idefics3 (SmolVLM's architecture: SigLIP-style vision tower, pixel shuffle, Llama decoder)
saved as a Hub repository in the three-file ONNX layout, with transformers' own processor as the reference.

``vision_encoder.onnx`` takes ``pixel_values`` ``[batch, images, 3, S, S]`` and ``pixel_attention_mask``
``[batch, images, S, S]`` (bool) as onnx-community's SmolVLM exports do, drops the all-zero padding images as
``Idefics3Model.get_image_features`` does, and gives ``image_features`` ``[real images, S²/(p²·s²), hidden]``;
``decoder_model_merged.onnx`` is optimum's If-merged decoder (vlm_build.merge_decoders).  Each image of
``S`` × ``S`` is a tile of the processor's split (or the global image): its patch grid (``S/p`` a side) comes out of
the pixel shuffle as a ``S/(p·s)`` grid of features.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import vlm_build as vb
import vlm_models as vm

torch = __import__("pytest").importorskip("torch")
transformers = __import__("pytest").importorskip("transformers")

TILE, PATCH, SCALE = 48, 8, 2  # a tile's side, the vision patch, the pixel shuffle's factor
SIDE = TILE // PATCH // SCALE  # 3 x 3 features per tile after the shuffle
N_TILE = SIDE * SIDE
LONGEST = 2 * TILE  # size.longest_edge: at most 2 x 2 tiles
LAYERS, HEADS, HIDDEN = 2, 4, 32
WORDS = "a photo of the cat sat on mat dog red blue green image shows where looks".split()
MARKERS = [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
SPECIALS = ["<pad>", "<unk>", "<s>", "</s>", "<image>", "<fake_token_around_image>", "<global-img>"]
SPECIALS += ["<end_of_utterance>", *MARKERS]
VOCAB_SIZE = 96
IMAGE_TOKEN = SPECIALS.index("<image>")
MEAN, STD = [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]  # SmolVLM's


def vocab() -> dict[str, int]:
    return vb.word_vocab(SPECIALS, WORDS, VOCAB_SIZE)


def build():
    """The seeded tiny Idefics3ForConditionalGeneration (eager attention everywhere)."""
    T = transformers
    torch.manual_seed(0)
    vision = T.Idefics3VisionConfig(
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        image_size=TILE,
        patch_size=PATCH,
    )
    text = T.LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=2,
        eos_token_id=3,
        pad_token_id=0,
    )
    cfg = T.Idefics3Config(vision_config=vision, text_config=text, scale_factor=SCALE, image_token_id=IMAGE_TOKEN)
    m = T.Idefics3ForConditionalGeneration(cfg)
    m.set_attn_implementation("eager")
    m.config.use_cache = False
    return m.eval()


def tokenizer():
    return vb.word_tokenizer(
        vocab(), "<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>", additional_special_tokens=SPECIALS[4:]
    )


def image_processor(split: bool = True):
    return transformers.Idefics3ImageProcessor(
        do_image_splitting=split,
        max_image_size={"longest_edge": TILE},
        size={"longest_edge": LONGEST},
        image_mean=MEAN,
        image_std=STD,
    )


def processor(repo: Path):
    """transformers' Idefics3Processor from the repository's files."""
    return transformers.Idefics3Processor(
        image_processor=transformers.Idefics3ImageProcessor.from_pretrained(str(repo)),
        tokenizer=transformers.PreTrainedTokenizerFast.from_pretrained(str(repo)),
        image_seq_len=N_TILE,
    )


class _Vision(torch.nn.Module):
    """pixel_values [B, N, 3, S, S] and pixel_attention_mask [B, N, S, S] -> image_features [real, n, hidden].

    As Idefics3Model.get_image_features for images of the full tile size (the processor's tiles and global image
    always are): padding images (all zero) dropped, every patch real, so the position ids are the vision
    embeddings' own for a full grid (computed once here by transformers' bucketing; torch.bucketize does not
    export)."""

    def __init__(self, m):
        super().__init__()
        self.m = m.model
        side = TILE // PATCH
        full = torch.ones(1, side, side, dtype=torch.bool)
        emb = self.m.vision_model.embeddings
        with torch.no_grad():  # the position ids the embeddings compute for a full grid (their own code)
            base = emb.position_embedding.weight.clone()
            emb.position_embedding.weight.zero_()
            emb.position_embedding.weight[:, 0] = torch.arange(base.shape[0], dtype=base.dtype)
            probe = emb(torch.zeros(1, 3, TILE, TILE), full) - emb.patch_embedding(
                torch.zeros(1, 3, TILE, TILE)
            ).flatten(2).transpose(1, 2)
            emb.position_embedding.weight.copy_(base)
        self.register_buffer("positions", probe[0, :, 0].round().long())

    def forward(self, pixel_values, pixel_attention_mask):
        b, n = pixel_values.shape[:2]
        px = pixel_values.reshape(b * n, *pixel_values.shape[2:])
        # padding images are all zero (and wholly masked): dropped, as get_image_features drops them
        mask = pixel_attention_mask.reshape(b * n, -1)
        real = (px != 0).flatten(1).any(dim=1) & mask.any(dim=1)
        px = px[real]
        vis = self.m.vision_model
        x = vis.embeddings.patch_embedding(px).flatten(2).transpose(1, 2)
        x = x + vis.embeddings.position_embedding(self.positions)[None]
        x = vis.encoder(inputs_embeds=x, attention_mask=None).last_hidden_state
        return self.m.connector(vis.post_layernorm(x))


def save_repo(repo: Path, split: bool = True) -> Path:
    """config.json, preprocessor_config.json, processor_config.json and the tokenizer at REPO/, the three ONNX files
    in REPO/onnx/."""
    m = build()
    onnx_dir = vb.start_repo(repo, m, tokenizer(), image_processor(split))
    (Path(repo) / "processor_config.json").write_text(json.dumps({"image_seq_len": N_TILE}))
    px = torch.randn(1, 2, 3, TILE, TILE, generator=torch.Generator().manual_seed(1))
    mask = torch.ones(1, 2, TILE, TILE, dtype=torch.bool)
    ids = torch.tensor([[2, 20, 21, 22]])
    axes = {"pixel_values": {0: "batch", 1: "images"}, "pixel_attention_mask": {0: "batch", 1: "images"}}
    axes["image_features"] = {0: "real_images"}
    vb.export_vision(_Vision(m), (px, mask), onnx_dir, ["pixel_values", "pixel_attention_mask"], axes)
    vb.export_embed(m, ids, onnx_dir)
    vb.export_merged_decoder(
        lambda path, past: vm._export_decoder(m, ids, path, with_past=past, layers=LAYERS), onnx_dir
    )
    return Path(repo)


def reference(m, enc: dict):
    """transformers' eager maps on the processor's own inputs: the vision tower's per real image (tile), the
    decoder's, and the logits."""
    px = torch.as_tensor(np.asarray(enc["pixel_values"]))
    with torch.no_grad():
        flat = px.reshape(-1, *px.shape[2:])
        real = flat[(flat != 0).flatten(1).any(dim=1)]
        v = m.model.vision_model(real, output_attentions=True)
        o = m(
            input_ids=torch.as_tensor(np.asarray(enc["input_ids"])),
            pixel_values=px,
            pixel_attention_mask=torch.as_tensor(np.asarray(enc["pixel_attention_mask"])),
            attention_mask=torch.as_tensor(np.asarray(enc["attention_mask"])),
            output_attentions=True,
        )
    return [a.numpy() for a in v.attentions], [a.numpy() for a in o.attentions], o.logits.numpy()
