"""An attnviz-trained model's inputs and the order of its attention maps, from its config alone (no torch).

Apart from :mod:`attnviz.training.model` (the torch modules) so that what needs only these names, the tasks'
data and scores and ``attnviz eval`` of an exported ONNX model, runs without importing torch.
"""

from __future__ import annotations

from attnviz.training.config import ModelConfig

# Input names per architecture; the exported ONNX graph takes them in this order.
INPUTS = {
    ("encoder", "tokens"): ("input_ids", "attention_mask"),
    ("encoder", "series"): ("series",),
    ("decoder", "tokens"): ("input_ids",),
    ("decoder", "series"): ("series",),
    ("encoder-decoder", "tokens"): ("input_ids", "attention_mask", "decoder_input_ids"),
    ("vit", "tokens"): ("pixel_values",),
    ("image-decoder", "tokens"): ("pixel_values", "decoder_input_ids"),
}
# attnviz.inputs roles of those names (see attnviz.core.metadata)
ROLES = {
    "input_ids": "tokens",
    "attention_mask": "mask",
    "series": "series",
    "decoder_input_ids": "decoder_tokens",
    "pixel_values": "image",
}


def input_names(cfg: ModelConfig) -> tuple[str, ...]:
    kind = cfg.input_kind if cfg.arch in ("encoder", "decoder") else "tokens"
    return INPUTS[(cfg.arch, kind)]


def encoder_layers(cfg: ModelConfig) -> int:
    """Encoder self-attention layers in front of the decoder's maps (0 for decoder-only and CNN image grids)."""
    if cfg.arch == "decoder" or (cfg.arch == "image-decoder" and cfg.image_encoder == "cnn"):
        return 0
    return cfg.n_layers


def cross_attention_indices(cfg: ModelConfig) -> list[int]:
    """Positions of the decoder cross-attention maps (one per decoder layer) in the canonical order of
    ``forward(..., return_attention=True)``: encoder layers, then per decoder layer self before cross."""
    if cfg.arch not in ("encoder-decoder", "image-decoder"):
        return []
    n_enc = encoder_layers(cfg)
    return [n_enc + 2 * layer + 1 for layer in range(cfg.n_dec_layers)]
