"""Small transformers written to be inspected.

Every attention goes through one explicit path (``q @ k^T * scale -> masked_fill -> softmax -> @ v``), never
``F.scaled_dot_product_attention``, so the probabilities exist as a tensor in the exported ONNX graph (a
``Softmax`` feeding the P·V ``MatMul``) where attnviz's engine finds them.  ``forward(..., return_attention=True)``
also returns them from PyTorch, in attnviz's canonical order (encoder layers, then per decoder layer self
before cross), for the export parity check.

Module names are the ones the engine reads as a scope hint: ``encoder.layers.N.self_attn``,
``decoder.layers.N.self_attn``, ``decoder.layers.N.cross_attn``.

Architectures (``ModelConfig.arch``):

* ``encoder`` – bidirectional stack over tokens (or a real-valued series), with a classify / lm / forecast head;
* ``decoder`` – the same stack with a causal mask (GPT-style);
* ``encoder-decoder`` – source encoder, causal target decoder with cross-attention (Vaswani et al. 2017);
* ``vit`` – patch embedding + CLS token + encoder, classifying from CLS (Dosovitskiy et al. 2021);
* ``image-decoder`` – an image encoder (ViT patches, or a small CNN feature grid as in Xu et al. 2015,
  "Show, Attend and Tell") whose grid the text decoder cross-attends to.

Pre-norm residual blocks (LayerNorm before attention / feed-forward) with a final LayerNorm per stack.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from attnviz.training.config import ModelConfig

# the input names, their roles and the maps' order by config live torch-free in training/layout.py (eval, the tasks)
from attnviz.training.layout import (  # noqa: F401  (also this module's names, as callers import them)
    INPUTS,
    ROLES,
    cross_attention_indices,
    encoder_layers,
    input_names,
)


class Attention(nn.Module):
    """Multi-head attention with an explicit softmax; returns (output, probabilities)."""

    def __init__(self, d_model: int, n_heads: int, dropout: float):
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.scale = 1.0 / math.sqrt(self.d_head)
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None, keep: torch.Tensor | None = None):
        """x (B, Tq, D); memory (B, Tk, D) for cross-attention, else x; keep: bool, broadcastable to (B, H, Tq, Tk)."""
        B, Tq, D = x.shape
        src = x if memory is None else memory  # (B, Tk, D)
        q = self.q_proj(x).view(B, Tq, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, Tq, dh)
        k = self.k_proj(src).view(B, -1, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, Tk, dh)
        v = self.v_proj(src).view(B, -1, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, Tk, dh)
        scores = (q @ k.transpose(-2, -1)) * self.scale  # (B, H, Tq, Tk)
        if keep is not None:
            # finfo.min, not -inf: a fully masked row becomes uniform instead of NaN
            scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)  # (B, H, Tq, Tk)
        probs = scores.softmax(dim=-1)  # (B, H, Tq, Tk)
        y = self.drop(probs) @ v  # (B, H, Tq, dh)
        y = y.transpose(1, 2).reshape(B, Tq, D)  # (B, Tq, D)
        return self.out_proj(y), probs


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(self.fc2(F.gelu(self.fc1(x))))  # (B, T, D)


class EncoderLayer(nn.Module):
    """Self-attention (optionally causal, for decoder-only stacks) + feed-forward, pre-norm."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.self_attn = Attention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.ff = FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, keep=None):
        a, p = self.self_attn(self.norm1(x), keep=keep)  # (B, T, D), (B, H, T, T)
        x = x + self.drop(a)
        x = x + self.ff(self.norm2(x))  # (B, T, D)
        return x, [p]


class DecoderLayer(nn.Module):
    """Causal self-attention + cross-attention over the encoder's memory + feed-forward, pre-norm."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.self_attn = Attention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.cross_attn = Attention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.norm3 = nn.LayerNorm(cfg.d_model)
        self.ff = FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, memory, self_keep=None, cross_keep=None):
        a, p_self = self.self_attn(self.norm1(x), keep=self_keep)  # (B, Tt, D), (B, H, Tt, Tt)
        x = x + self.drop(a)
        c, p_cross = self.cross_attn(self.norm2(x), memory=memory, keep=cross_keep)  # (B, Tt, D), (B, H, Tt, Ts)
        x = x + self.drop(c)
        x = x + self.ff(self.norm3(x))  # (B, Tt, D)
        return x, [p_self, p_cross]


class Stack(nn.Module):
    """``layers`` + final norm; collects each layer's probabilities in order."""

    def __init__(self, cfg: ModelConfig, n: int, layer_cls):
        super().__init__()
        self.layers = nn.ModuleList(layer_cls(cfg) for _ in range(n))
        self.norm = nn.LayerNorm(cfg.d_model)

    def forward(self, x, *args, **kw):
        probs = []
        for layer in self.layers:
            x, p = layer(x, *args, **kw)
            probs.extend(p)
        return self.norm(x), probs


class Positions(nn.Module):
    """Adds position information: a fixed sinusoidal table or a learned embedding."""

    def __init__(self, kind: str, max_len: int, d_model: int):
        super().__init__()
        self.kind = kind
        if kind == "learned":
            self.table = nn.Parameter(torch.randn(max_len, d_model) * 0.02)  # (L, D)
        else:
            pos = torch.arange(max_len, dtype=torch.float32)[:, None]  # (L, 1)
            div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
            pe = torch.zeros(max_len, d_model)  # (L, D)
            pe[:, 0::2] = torch.sin(pos * div)
            pe[:, 1::2] = torch.cos(pos * div[: d_model // 2])
            self.register_buffer("table", pe, persistent=False)

    def forward(self, x):
        return x + self.table[: x.size(1)]  # (B, T, D)


class PatchEmbed(nn.Module):
    """Image -> non-overlapping patches -> vectors; (B, C, H, W) -> (B, g*g, D), row-major."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.proj = nn.Conv2d(cfg.channels, cfg.d_model, kernel_size=cfg.patch_size, stride=cfg.patch_size)

    def forward(self, img):
        x = self.proj(img)  # (B, D, g, g)
        return x.flatten(2).transpose(1, 2)  # (B, g*g, D)


class CnnGrid(nn.Module):
    """A small CNN whose last feature map is the grid the decoder attends over (Show, Attend and Tell)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        n_down = int(round(math.log2(cfg.patch_size)))
        if 2**n_down != cfg.patch_size:
            raise ValueError("cnn image encoder needs a power-of-two patch_size (the total stride)")
        width = max(16, cfg.d_model // 2)
        layers: list[nn.Module] = [nn.Conv2d(cfg.channels, width, 3, padding=1), nn.ReLU()]
        for _ in range(n_down):
            layers += [nn.Conv2d(width, width, 3, stride=2, padding=1), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.proj = nn.Conv2d(width, cfg.d_model, 1)

    def forward(self, img):
        x = self.proj(self.body(img))  # (B, D, g, g)
        return x.flatten(2).transpose(1, 2)  # (B, g*g, D)


class AttnModel(nn.Module):
    """One model for every architecture in :data:`attnviz.training.config.ARCHS`.

    ``forward`` takes the inputs named by :func:`input_names` as keywords and returns the logits
    (``(B, n_classes)``, ``(B, T, vocab)`` or ``(B, horizon)``), plus the attention probabilities in
    canonical order when ``return_attention=True``.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        d = cfg.d_model
        self.drop = nn.Dropout(cfg.dropout)
        arch = cfg.arch
        if arch in ("vit", "image-decoder"):
            n_patches = cfg.grid * cfg.grid
            if arch == "image-decoder" and cfg.image_encoder == "cnn":
                self.image_embed = CnnGrid(cfg)
            else:
                self.image_embed = PatchEmbed(cfg)
            self.use_cls = arch == "vit" and cfg.cls_token
            if self.use_cls:
                self.cls = nn.Parameter(torch.zeros(1, 1, d))
            # images always use learned 2-D-agnostic positions over the flattened grid
            self.image_pos = nn.Parameter(torch.randn(1, n_patches + int(self.use_cls), d) * 0.02)
        elif cfg.input_kind == "series":
            self.embed = nn.Linear(1, d)
        else:
            self.embed = nn.Embedding(cfg.vocab_size, d)
        if arch != "vit":
            self.pos = Positions(cfg.positions, cfg.max_len, d)
        n_enc = cfg.n_layers
        if arch == "decoder":
            self.decoder = Stack(cfg, cfg.n_layers, EncoderLayer)  # causal self-attention only
        elif arch == "image-decoder" and cfg.image_encoder == "cnn":
            n_enc = 0
        if arch != "decoder" and n_enc > 0:
            self.encoder = Stack(cfg, n_enc, EncoderLayer)
        if arch in ("encoder-decoder", "image-decoder"):
            self.tgt_embed = nn.Embedding(cfg.target_vocab, d)
            self.decoder = Stack(cfg, cfg.n_dec_layers, DecoderLayer)
            self.lm_head = nn.Linear(d, cfg.target_vocab)
        elif arch == "vit" or cfg.head == "classify":
            self.head = nn.Linear(d, cfg.n_classes)
        elif cfg.head == "lm":
            self.head = nn.Linear(d, cfg.vocab_size)
        else:
            self.head = nn.Linear(d, cfg.horizon)
        self.register_buffer(
            "causal", torch.tril(torch.ones(cfg.max_len, cfg.max_len, dtype=torch.bool)), persistent=False
        )

    @property
    def input_names(self) -> tuple[str, ...]:
        return input_names(self.cfg)

    # -- pieces ----------------------------------------------------------------
    def _embed_seq(self, input_ids=None, series=None):
        if series is not None:
            x = self.embed(series.unsqueeze(-1))  # (B, T, D)
        else:
            x = self.embed(input_ids)  # (B, T, D)
        return self.drop(self.pos(x))  # (B, T, D)

    def _embed_image(self, pixel_values):
        x = self.image_embed(pixel_values)  # (B, N, D)
        if self.use_cls:
            x = torch.cat([self.cls.expand(x.size(0), -1, -1), x], dim=1)  # (B, 1+N, D)
        return self.drop(x + self.image_pos)  # (B, N', D)

    def _causal(self, t: int):
        return self.causal[:t, :t][None, None]  # (1, 1, T, T)

    def _pool(self, x, attention_mask=None):
        pool = "cls" if self.cfg.arch == "vit" else self.cfg.pool
        if pool == "cls":
            return x[:, 0]  # (B, D)
        if pool == "last":
            return x[:, -1]  # (B, D)
        if attention_mask is None:
            return x.mean(dim=1)  # (B, D)
        m = attention_mask.unsqueeze(-1).to(x.dtype)  # (B, T, 1)
        return (x * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)  # (B, D)

    def _decode(self, decoder_input_ids, memory, cross_keep):
        y = self.drop(self.pos(self.tgt_embed(decoder_input_ids)))  # (B, Tt, D)
        y, probs = self.decoder(y, memory, self_keep=self._causal(y.size(1)), cross_keep=cross_keep)
        return self.lm_head(y), probs  # (B, Tt, V)

    # -- forward ---------------------------------------------------------------
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        series=None,
        pixel_values=None,
        decoder_input_ids=None,
        return_attention: bool = False,
    ):
        arch = self.cfg.arch
        probs: list[torch.Tensor] = []
        if arch in ("encoder", "decoder"):
            x = self._embed_seq(input_ids, series)  # (B, T, D)
            if arch == "encoder":
                keep = None if attention_mask is None else attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T)
                x, probs = self.encoder(x, keep=keep)
            else:
                x, probs = self.decoder(x, keep=self._causal(x.size(1)))
            if self.cfg.head == "lm":
                logits = self.head(x)  # (B, T, V)
            else:
                logits = self.head(self._pool(x, attention_mask))  # (B, n_classes) or (B, horizon)
        elif arch == "vit":
            x = self._embed_image(pixel_values)  # (B, 1+N, D)
            x, probs = self.encoder(x)
            logits = self.head(self._pool(x))  # (B, n_classes)
        elif arch == "encoder-decoder":
            src_keep = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, Ts)
            memory, probs = self.encoder(self._embed_seq(input_ids), keep=src_keep)  # (B, Ts, D)
            logits, dec_probs = self._decode(decoder_input_ids, memory, src_keep)  # (B, Tt, V)
            probs = probs + dec_probs
        else:  # image-decoder
            memory = self._embed_image(pixel_values)  # (B, N, D)
            if hasattr(self, "encoder"):
                memory, probs = self.encoder(memory)
            logits, dec_probs = self._decode(decoder_input_ids, memory, None)  # (B, Tt, V)
            probs = probs + dec_probs
        if return_attention:
            return logits, probs
        return logits

    def attention_layout(self) -> list[tuple[str, str, int]]:
        """(stack, kind, layer) of each returned probability map, canonical order."""
        out = []
        if self.cfg.arch == "decoder":
            return [("decoder", "self", i) for i in range(len(self.decoder.layers))]
        if hasattr(self, "encoder"):
            out += [("encoder", "self", i) for i in range(len(self.encoder.layers))]
        if self.cfg.arch in ("encoder-decoder", "image-decoder"):
            for i in range(len(self.decoder.layers)):
                out += [("decoder", "self", i), ("decoder", "cross", i)]
        return out
