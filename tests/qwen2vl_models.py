"""A tiny random-init Qwen2-VL (ViT with 2-D rotary patches and a 2×2 patch merger, Qwen2 decoder with 3-D M-RoPE)
saved as a Hub repository in the three-file ONNX layout (``REPO/onnx/vision_encoder.onnx``, ``embed_tokens.onnx``,
``decoder_model_merged.onnx``), with its eager reference maps.  The export and If-merge helpers are
tests/vlm_build.py's.

The vision file takes what ``Qwen2VisionTransformerPretrainedModel.forward`` takes for one image: the processor's
flattened patches ``pixel_values [grid_t·grid_h·grid_w, C·T·P·P]`` and ``image_grid_thw [1, 3]``; its rotary
positions (the patches' rows and columns, laid out block-major over the merge windows) are computed in the graph
from ``image_grid_thw``, so one file serves every image size.  transformers' eager vision attention splits by
``cu_seqlens`` with ``.tolist()`` (constants under tracing), so the exported forward writes the same block out
over the one image.  The decoder takes ``position_ids [3, B, T]`` (M-RoPE's temporal, height and width rows),
which the caller builds (transformers' ``get_rope_index``).
"""

from __future__ import annotations

import json
from pathlib import Path

import vlm_build as vb

torch = __import__("pytest").importorskip("torch")
transformers = __import__("pytest").importorskip("transformers")

PATCH, MERGE, TEMPORAL = 8, 2, 2
FACTOR = PATCH * MERGE  # smart_resize rounds each side to a multiple of this
MIN_PIXELS, MAX_PIXELS = 16 * 16, 64 * 64
LAYERS, HEADS, HIDDEN, HEAD_DIM = 2, 4, 32, 8
WORDS = "a photo of the cat sat on mat dog red blue green describe where looks user assistant".split()
SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
VOCAB_SIZE = 64
IMAGE_TOKEN = SPECIALS.index("<|image_pad|>")
MEAN, STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]  # CLIP's (Qwen2-VL's)


def vocab() -> dict[str, int]:
    return vb.word_vocab(SPECIALS, WORDS, VOCAB_SIZE)


def build():
    """The seeded tiny Qwen2VLForConditionalGeneration (eager attention everywhere)."""
    T = transformers
    torch.manual_seed(0)
    v = vocab()
    cfg = T.Qwen2VLConfig(
        vision_config=dict(
            depth=LAYERS,
            embed_dim=HIDDEN,
            hidden_size=HIDDEN,
            mlp_ratio=2,
            num_heads=HEADS,
            in_channels=3,
            patch_size=PATCH,
            spatial_merge_size=MERGE,
            temporal_patch_size=TEMPORAL,
        ),
        text_config=dict(
            vocab_size=VOCAB_SIZE,
            hidden_size=HIDDEN,
            intermediate_size=64,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            num_key_value_heads=2,
            max_position_embeddings=256,
            rope_parameters={"rope_type": "default", "mrope_section": [2, 1, 1], "rope_theta": 10000.0},
            bos_token_id=v["<|endoftext|>"],
            eos_token_id=v["<|im_end|>"],
            pad_token_id=v["<|endoftext|>"],
        ),
        image_token_id=IMAGE_TOKEN,
        video_token_id=v["<|video_pad|>"],
        vision_start_token_id=v["<|vision_start|>"],
        vision_end_token_id=v["<|vision_end|>"],
    )
    m = T.Qwen2VLForConditionalGeneration(cfg)
    m.set_attn_implementation("eager")
    m.config.use_cache = False
    return m.eval()


def tokenizer():
    unk = "<|endoftext|>"
    return vb.word_tokenizer(
        vocab(), unk, pad_token=unk, eos_token="<|im_end|>", additional_special_tokens=SPECIALS[1:]
    )


def image_processor():
    return transformers.Qwen2VLImageProcessorPil(
        size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
        patch_size=PATCH,
        temporal_patch_size=TEMPORAL,
        merge_size=MERGE,
        image_mean=MEAN,
        image_std=STD,
    )


def expand(text: str, grid_thw) -> str:
    """Qwen2VLProcessor's expansion (``replace_image_token``): each ``<|image_pad|>`` repeated
    grid_t·grid_h·grid_w / merge² times, one image's grid each in order.  (Qwen2VLProcessor itself cannot be
    built here: it wants a video processor, and that torchvision.)"""
    parts = text.split("<|image_pad|>")
    out = parts[0]
    for (t, h, w), rest in zip(grid_thw, parts[1:]):
        out += "<|image_pad|>" * (int(t) * int(h) * int(w) // MERGE**2) + rest
    return out


class _Vision(torch.nn.Module):
    """pixel_values [N, C·T·P·P], image_grid_thw [1, 3] -> image_features [N / merge², hidden] for one image."""

    def __init__(self, m):
        super().__init__()
        self.v = m.model.visual

    def forward(self, pixel_values, image_grid_thw):
        from transformers.models.qwen2_vl.modeling_qwen2_vl import apply_rotary_pos_emb_vision

        v, s = self.v, self.v.spatial_merge_size
        t, h, w = image_grid_thw[0, 0], image_grid_thw[0, 1], image_grid_thw[0, 2]
        # as transformers.vision_utils.get_vision_position_ids: rows and columns, block-major over merge windows
        rows = torch.arange(h)[:, None].expand(h, w).reshape(h // s, s, w // s, s).transpose(1, 2).flatten()
        cols = torch.arange(w)[None, :].expand(h, w).reshape(h // s, s, w // s, s).transpose(1, 2).flatten()
        pos = torch.stack([rows, cols], dim=-1).repeat(t, 1)
        x = v.patch_embed(pixel_values)
        cos, sin = v.rotary_pos_emb(x, pos)
        n = x.shape[0]
        for blk in v.blocks:  # Qwen2VLVisionBlock with VisionAttention's eager path over one image
            a = blk.attn
            q, k, val = a.qkv(blk.norm1(x)).reshape(n, 3, a.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
            q, k = apply_rotary_pos_emb_vision(q, k, cos, sin)
            q, k, val = (z.transpose(0, 1).unsqueeze(0) for z in (q, k, val))
            weights = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * a.scaling, dim=-1)
            out = torch.matmul(weights, val).transpose(1, 2).reshape(n, -1)
            x = x + a.proj(out)
            x = x + blk.mlp(blk.norm2(x))
        return v.merger(x)


def _Decoder(m):
    """inputs_embeds, attention_mask, position_ids [3, B, T], past key/values -> logits, present key/values."""
    lm = m.model.language_model
    return vb.CachedDecoder(lm, m.lm_head, lm.config, lm.config.num_hidden_layers)


def _export_decoder(m, ids, path: Path, with_past: bool) -> None:
    emb, mask, pos = vb.decoder_example(m, ids, with_past)
    inputs = {
        "inputs_embeds": (emb, {0: "batch", 1: "seq"}),
        "attention_mask": (mask, {0: "batch", 1: "total"}),
        "position_ids": (pos[None].expand(3, 1, -1).contiguous(), {1: "batch", 2: "seq"}),  # M-RoPE's three rows
    }
    vb.export_decoder(_Decoder(m), path, inputs, with_past, LAYERS, m.config.text_config.num_key_value_heads, HEAD_DIM)


def save_repo(repo: Path) -> Path:
    """config.json, preprocessor_config.json and tokenizer at REPO/, the three ONNX files in REPO/onnx/."""
    m = build()
    onnx_dir = vb.start_repo(repo, m, tokenizer(), image_processor())
    # a grid of 4 × 6 patches (one image of 32 × 48 pixels), exported with dynamic patch counts
    grid = torch.tensor([[1, 4, 6]])
    px = torch.randn(24, 3 * TEMPORAL * PATCH * PATCH, generator=torch.Generator().manual_seed(1))
    ids = torch.tensor([[1, 8, 9, 10]])
    axes = {"pixel_values": {0: "patches"}, "image_features": {0: "tokens"}}
    vb.export_vision(_Vision(m), (px, grid), onnx_dir, ["pixel_values", "image_grid_thw"], axes)
    vb.export_embed(m, ids, onnx_dir)
    vb.export_merged_decoder(lambda path, past: _export_decoder(m, ids, path, with_past=past), onnx_dir)
    return Path(repo)


def image_types(ids):
    """The processor's mm_token_type_ids: 1 on image tokens."""
    ids = torch.as_tensor(ids)
    return (ids == IMAGE_TOKEN).to(torch.int64)


def greedy(m, ids, pixel_values, grid_thw, n: int):
    """transformers' greedy generation of ``n`` tokens (EOS off) on the processor's inputs: the whole sequence."""
    m.model.rope_deltas = None  # a previous generation's deltas would shift this one's positions
    with torch.no_grad():
        return m.generate(
            input_ids=ids,
            pixel_values=torch.as_tensor(pixel_values),
            image_grid_thw=torch.as_tensor(grid_thw),
            mm_token_type_ids=image_types(ids),
            attention_mask=torch.ones(ids.shape, dtype=torch.int64),
            max_new_tokens=n,
            do_sample=False,
            eos_token_id=None,
        )


def rope_index(m, ids, grid_thw, attention_mask=None):
    """transformers' get_rope_index: position_ids [3, B, T] and the rope deltas [B, 1]."""
    ids = torch.as_tensor(ids)
    with torch.no_grad():
        return m.model.get_rope_index(
            ids,
            mm_token_type_ids=image_types(ids),
            image_grid_thw=torch.as_tensor(grid_thw),
            attention_mask=None if attention_mask is None else torch.as_tensor(attention_mask),
        )


def reference(m, pixel_values, grid_thw, input_ids, attention_mask=None):
    """transformers' eager decoder maps (Qwen2VLForConditionalGeneration on the processor's inputs), its image
    features (the vision tower's merger output) and logits."""
    ids = torch.as_tensor(input_ids)
    mask = torch.ones(ids.shape, dtype=torch.int64) if attention_mask is None else torch.as_tensor(attention_mask)
    with torch.no_grad():
        feats = m.model.get_image_features(torch.as_tensor(pixel_values), torch.as_tensor(grid_thw)).pooler_output
        m.model.rope_deltas = None
        o = m(
            input_ids=ids,
            pixel_values=torch.as_tensor(pixel_values),
            image_grid_thw=torch.as_tensor(grid_thw),
            mm_token_type_ids=image_types(ids),
            attention_mask=mask,
            output_attentions=True,
        )
    return torch.cat(feats).numpy(), [a.numpy() for a in o.attentions], o.logits.numpy()


def preprocessor_json(repo: Path) -> dict:
    return json.loads((Path(repo) / "preprocessor_config.json").read_text())


def record_vision_attention(model, pixel_values, grid, modeling=None) -> list:
    """transformers' eager attention of every vision block (one chunk a block for Qwen2-VL; one per window for
    Qwen2.5-VL's windowed blocks), recorded through its attention interface: the vision tower returns no weights of
    its own.  ``modeling``: the family's modeling module (default Qwen2-VL's)."""
    if modeling is None:
        from transformers.models.qwen2_vl import modeling_qwen2_vl as modeling
    seen: list = []

    def record(module, q, k, v, attention_mask, **kw):
        out, w = modeling.eager_attention_forward(module, q, k, v, attention_mask, **kw)
        seen.append(w.numpy())
        return out, w

    transformers.AttentionInterface.register("attnviz_record", record)
    vision = model.model.visual
    old = vision.config._attn_implementation
    vision.config._attn_implementation = "attnviz_record"
    try:
        with torch.no_grad():
            vision(torch.as_tensor(pixel_values), grid_thw=torch.as_tensor(grid))
    finally:
        vision.config._attn_implementation = old
    return seen
