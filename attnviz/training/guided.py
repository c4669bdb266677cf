"""Guided alignment (Garg et al. 2019, "Jointly Learning to Align and Translate with Transformer Models").

Chosen decoder cross-attention heads are trained, next to the task loss, to put their mass on the source
subwords that the alignment labels link to each target token: for every supervised row the label is the
uniform distribution over the linked source subwords, and the loss is the cross-entropy between that
distribution and the head's attention row, averaged over supervised rows and heads.  Rows without any link
(unaligned target words, BOS/EOS, padding) are not supervised.

Row convention (``TrainConfig.align_convention``): the labels arrive in the *predict* convention (row ``t``
= the target subword that position ``t`` predicts, ``labels[t]``).  ``"input"`` shifts them down one row, so
row ``t`` stands for the decoder's *input* token ``y[t-1]`` ("Shift-Att", Chen et al. 2020): the query then
already knows the word it aligns, which makes the head a cleaner aligner; ``"predict"`` keeps them.

The task supplies the labels as ``batch["align"]``: ``uint8 [B, Tt, Ts]``, 1 where the target subword of
row ``t`` (predict convention) belongs to a word linked to the word of source subword ``s``.
"""

from __future__ import annotations

from attnviz import AttnvizError
from attnviz.training.config import ModelConfig, TrainConfig
from attnviz.training.model import cross_attention_indices

EPS = 1e-9  # keeps log() finite where a head gives a linked subword (numerically) zero mass


def check(mcfg: ModelConfig, tcfg: TrainConfig) -> None:
    """One clear error for a guided-alignment setting the model cannot take."""
    if not tcfg.align_weight:
        return
    if mcfg.arch not in ("encoder-decoder", "image-decoder"):
        raise AttnvizError(
            f"guided alignment needs an encoder-decoder or image-decoder model (this one is {mcfg.arch!r}); "
            "set align_weight to 0"
        )
    for layer, head in tcfg.align_heads:
        if not (0 <= layer < mcfg.n_dec_layers and 0 <= head < mcfg.n_heads):
            raise AttnvizError(
                f"guided alignment head {layer}:{head} does not exist: the decoder has "
                f"{mcfg.n_dec_layers} layers of {mcfg.n_heads} heads"
            )


def shift_rows(align, convention: str):
    """Labels in the predict convention -> the requested one (torch or numpy ``[B, Tt, Ts]``)."""
    if convention == "predict":
        return align
    out = align.clone() if hasattr(align, "clone") else align.copy()
    out[:, 1:] = align[:, :-1]
    out[:, 0] = 0  # row 0 reads BOS, which is no target word
    return out


def loss(probs: list, align, mcfg: ModelConfig, tcfg: TrainConfig):
    """Guided-alignment cross-entropy (torch scalar) of the supervised heads against ``align`` (see module doc)."""
    import torch

    target = shift_rows(align.to(probs[0].dtype), tcfg.align_convention)  # (B, Tt, Ts)
    mass = target.sum(-1, keepdim=True)  # (B, Tt, 1)
    rows = mass.squeeze(-1) > 0  # (B, Tt) supervised rows
    if not bool(rows.any()):
        return probs[0].sum() * 0.0  # keeps the graph; a batch without links adds nothing
    q = target / mass.clamp(min=1.0)  # uniform over the linked source subwords
    idx = cross_attention_indices(mcfg)
    total = []
    for layer, head in tcfg.align_heads:
        p = probs[idx[layer]][:, head]  # (B, Tt, Ts)
        ce = -(q * torch.log(p + EPS)).sum(-1)  # (B, Tt)
        total.append(ce[rows].mean())
    return torch.stack(total).mean()
