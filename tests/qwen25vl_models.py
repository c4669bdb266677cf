"""A tiny random-init Qwen2.5-VL saved as a Hub repository in the three-file ONNX layout, with its eager reference
maps (the tokenizer, processor, decoder export and decoder reference are tests/qwen2vl_models.py's: the text side
and the image processor are Qwen2-VL's).

What differs is the vision tower: RMSNorm and a gated MLP, a merger with an RMSNorm in front, and **window
attention**: the patches are reordered merge unit by merge unit into windows of ``window_size`` pixels
(``get_vision_window_index``), every block but those in ``fullatt_block_indexes`` attends within its window only,
and the merger's output is put back in the image's order.  transformers' eager path splits the sequence by
``cu_window_seqlens`` with ``.tolist()`` (constants under tracing); the exported forward computes the same order
and windows from ``image_grid_thw`` in the graph (each unit's window and place in it, sorted) and writes a window's
attention as the whole sequence's softmax with the other windows' keys masked out, so one file serves every image
size.  Its maps' keys are in the window order, as transformers' blocks see them.
"""

from __future__ import annotations

from pathlib import Path

import qwen2vl_models as q2
import vlm_build as vb

torch = __import__("pytest").importorskip("torch")
transformers = __import__("pytest").importorskip("transformers")

PATCH, MERGE, TEMPORAL = q2.PATCH, q2.MERGE, q2.TEMPORAL
FACTOR = q2.FACTOR
WINDOW = 32  # pixels: 2 × 2 merge units (4 × 4 patches) a window
UNITS = WINDOW // MERGE // PATCH  # a window's side in merge units
DEPTH, FULL = 3, [1]  # blocks 0 and 2 attend within windows, block 1 over the whole image
LAYERS, HEADS, HIDDEN = q2.LAYERS, q2.HEADS, q2.HIDDEN
IMAGE_TOKEN = q2.IMAGE_TOKEN


def build():
    """The seeded tiny Qwen2_5_VLForConditionalGeneration (eager attention everywhere)."""
    T = transformers
    torch.manual_seed(0)
    v = q2.vocab()
    cfg = T.Qwen2_5_VLConfig(
        vision_config=dict(
            depth=DEPTH,
            hidden_size=HIDDEN,
            intermediate_size=48,
            num_heads=HEADS,
            in_channels=3,
            patch_size=PATCH,
            spatial_merge_size=MERGE,
            temporal_patch_size=TEMPORAL,
            window_size=WINDOW,
            fullatt_block_indexes=FULL,
            out_hidden_size=HIDDEN,
        ),
        text_config=dict(
            vocab_size=q2.VOCAB_SIZE,
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
    m = T.Qwen2_5_VLForConditionalGeneration(cfg)
    m.set_attn_implementation("eager")
    m.config.use_cache = False
    return m.eval()


def window_order(h, w):
    """Merge units (row-major over the merged grid ``h // MERGE`` × ``w // MERGE``) in get_vision_window_index's
    order, and each unit's window: windows row by row, units row by row inside each (tensors, traceable)."""
    gh, gw = h // MERGE, w // MERGE
    i = torch.arange(gh)[:, None].expand(gh, gw).flatten()
    j = torch.arange(gw)[None, :].expand(gh, gw).flatten()
    window = (i // UNITS) * gw + j // UNITS  # gw >= the windows a row: any such stride keeps the row-major order
    key = (window * UNITS + i % UNITS) * UNITS + j % UNITS
    order = torch.argsort(key)
    return order, window[order]


class _Vision(torch.nn.Module):
    """pixel_values [N, C·T·P·P], image_grid_thw [1, 3] -> image_features [N / merge², hidden] for one image."""

    def __init__(self, m):
        super().__init__()
        self.v = m.model.visual

    def forward(self, pixel_values, image_grid_thw):
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import apply_rotary_pos_emb_vision

        v, s = self.v, MERGE
        t, h, w = image_grid_thw[0, 0], image_grid_thw[0, 1], image_grid_thw[0, 2]
        rows = torch.arange(h)[:, None].expand(h, w).reshape(h // s, s, w // s, s).transpose(1, 2).flatten()
        cols = torch.arange(w)[None, :].expand(h, w).reshape(h // s, s, w // s, s).transpose(1, 2).flatten()
        pos = torch.stack([rows, cols], dim=-1).repeat(t, 1)
        order, window = window_order(h, w)
        x = v.patch_embed(pixel_values)
        n = x.shape[0]
        x = x.reshape(n // (s * s), s * s, -1)[order].reshape(n, -1)  # permute_input_for_window_attn
        cos, sin = v.rotary_pos_emb(x, pos)
        cos = cos.reshape(n // (s * s), s * s, -1)[order].reshape(n, -1)
        sin = sin.reshape(n // (s * s), s * s, -1)[order].reshape(n, -1)
        per_patch = window.repeat_interleave(s * s)
        apart = per_patch[:, None] != per_patch[None, :]
        for layer, blk in enumerate(v.blocks):  # Qwen2_5_VLVisionBlock, the eager path over one image
            a = blk.attn
            q, k, val = a.qkv(blk.norm1(x)).reshape(n, 3, a.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
            q, k = apply_rotary_pos_emb_vision(q, k, cos, sin)
            q, k, val = (z.transpose(0, 1).unsqueeze(0) for z in (q, k, val))
            scores = torch.matmul(q, k.transpose(2, 3)) * a.scaling
            if layer not in FULL:  # a window's keys only (a chunk of cu_window_seqlens)
                scores = scores.masked_fill(apart, torch.finfo(scores.dtype).min)
            weights = torch.softmax(scores, dim=-1)
            out = torch.matmul(weights, val).transpose(1, 2).reshape(n, -1)
            x = x + a.proj(out)
            x = x + blk.mlp(blk.norm2(x))
        return v.merger(x)[torch.argsort(order)]


def save_repo(repo: Path) -> Path:
    """config.json, preprocessor_config.json and tokenizer at REPO/, the three ONNX files in REPO/onnx/."""
    m = build()
    onnx_dir = vb.start_repo(repo, m, q2.tokenizer(), q2.image_processor())
    # a grid of 6 × 8 patches (3 × 4 merge units: windows of 2 × 2, 2 × 2, 1 × 2, 1 × 2), dynamic patch counts
    grid = torch.tensor([[1, 6, 8]])
    px = torch.randn(48, 3 * TEMPORAL * PATCH * PATCH, generator=torch.Generator().manual_seed(1))
    ids = torch.tensor([[1, 8, 9, 10]])
    axes = {"pixel_values": {0: "patches"}, "image_features": {0: "tokens"}}
    vb.export_vision(_Vision(m), (px, grid), onnx_dir, ["pixel_values", "image_grid_thw"], axes)
    vb.export_embed(m, ids, onnx_dir)
    vb.export_merged_decoder(lambda path, past: q2._export_decoder(m, ids, path, with_past=past), onnx_dir)
    return Path(repo)


def vision_reference(m, pixel_values, grid):
    """transformers' eager vision attention of every block, recorded through its own attention interface, each
    block's chunks (windows, or the whole image) placed on the diagonal of one [1, H, N, N] map in the blocks'
    (window) order; and the window order of the merge units."""
    import numpy as np
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as mq
    from transformers.vision_utils import get_vision_window_index

    seen = q2.record_vision_attention(m, pixel_values, grid, mq)
    index, _ = get_vision_window_index(torch.as_tensor(grid), MERGE, WINDOW, PATCH)
    return on_diagonal(seen, int(np.prod(grid[0]))), index.numpy()


def on_diagonal(seen, n: int) -> list:
    """The recorded chunks (every block's windows, or whole images, in the blocks' order) placed on the diagonal of
    one [1, H, n, n] map a block: what attnviz's vision site holds for the same run."""
    import numpy as np

    maps, k = [], 0
    for _ in range(DEPTH):
        full = np.zeros((1, HEADS, n, n), np.float32)
        at = 0
        while at < n:
            w = seen[k]
            full[:, :, at : at + w.shape[-1], at : at + w.shape[-1]] = w
            at += w.shape[-1]
            k += 1
        maps.append(full)
    assert k == len(seen)
    return maps
