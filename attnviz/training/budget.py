"""What an exported model's ``attnviz.config`` metadata makes ``attnviz eval`` allocate, checked before any of it.

The metadata is text anyone can edit: ``n_test=10**9`` or ``max_len=10**6`` would make eval generate the
held-out split and run batches of that size (a 14.9 GiB run in the hostile-input campaign).  The raw dicts are
checked for whole, non-negative sizes first (``n_heads=0`` would divide by zero in ``ModelConfig.validate``),
then an upper estimate of the bytes is held against the caps in :mod:`attnviz.core.limits`.
"""

from __future__ import annotations

from dataclasses import replace

from attnviz import AttnvizError
from attnviz.core import limits

# fields that size something, with the least value that makes sense (0 = "none" is allowed where noted)
_MODEL_SIZES = {
    "d_model": 1,
    "n_heads": 1,
    "n_layers": 0,  # 0 = no encoder (cnn image encoder)
    "n_dec_layers": 0,
    "d_ff": 1,
    "max_len": 1,
    "vocab_size": 1,
    "tgt_vocab_size": 0,  # 0 = same as vocab_size
    "n_classes": 1,
    "horizon": 1,
    "image_size": 1,
    "channels": 1,
    "patch_size": 1,
}
_TRAIN_SIZES = {"n_train": 0, "n_test": 1, "batch_size": 1}
EVAL_BATCH = 256  # tasks score in batches of this many examples (runners.batched)


def check_sizes(model: dict, train: dict) -> None:
    """Refuse a config whose size fields are not whole numbers at least their minimum (one line)."""
    for section, raw, least in (("model", model, _MODEL_SIZES), ("train", train, _TRAIN_SIZES)):
        for key, lo in least.items():
            if key not in raw:
                continue  # the dataclass default applies
            v = raw[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise AttnvizError(
                    f"the model's metadata sets {section} config {key}={v!r}: give a whole number >= {lo}; "
                    "re-export the model with 'attnviz train'"
                )


def check_eval(mcfg, tcfg) -> None:
    """Estimate the held-out data and one batch of maps and logits; refuse above the limits."""
    examples = tcfg.n_train + tcfg.n_test  # some tasks regenerate the training split to exclude it from test
    limits.check("examples", examples, "the held-out and training splits in the model's metadata")
    image = mcfg.arch in ("vit", "image-decoder")
    if image:
        limits.check("pixels", mcfg.image_size**2, f"image_size={mcfg.image_size} in the model's metadata")
    tokens = mcfg.max_len + 1  # the decoder input has one more position (BOS)
    if image:
        tokens = max(tokens, mcfg.grid**2 + 1)
    limits.check("tokens", tokens, f"max_len={mcfg.max_len} in the model's metadata")
    # per example: ~4 int64 token arrays, a uint8 alignment table, uint8 + float32 pixels
    per_example = tokens * 8 * 4 + tokens * tokens + (mcfg.image_size**2 * mcfg.channels * 5 if image else 0)
    n_maps = mcfg.n_layers + 2 * mcfg.n_dec_layers  # self-attention per layer, plus cross in each decoder layer
    batch = min(EVAL_BATCH, tcfg.n_test)
    maps = batch * n_maps * mcfg.n_heads * tokens * tokens * 4
    logits = batch * tokens * max(mcfg.vocab_size, mcfg.target_vocab, mcfg.n_classes) * 4
    mb = (examples * per_example + maps + logits) / 2**20
    limits.check("eval_mb", mb, "evaluating the sizes in the model's metadata")


# past any machine (core/limits.py): no --max-memory is worth naming, only the sizes that set the need
LOWER = (
    "choose smaller sizes with --set: fewer layers (n_layers, n_dec_layers), a shorter max_len, a smaller "
    "d_model, d_ff or batch_size"
)


def check_training_memory(mcfg, tcfg) -> None:
    """Before torch allocates a model: its parameters counted on torch's ``meta`` device (shapes, no memory), as
    the weights, their gradients and AdamW's two moments (float32: 16 bytes a parameter), plus one batch's
    attention scores and feed-forward activations kept for the backward pass; refused over the memory cap
    (``--max-memory``) in one line.  ``train --set d_model=1000000`` asked for 4 TB before this."""
    import torch

    from attnviz.training.model import AttnModel

    def count(enc: int, dec: int) -> int:
        with torch.device("meta"):
            return sum(p.numel() for p in AttnModel(replace(mcfg, n_layers=enc, n_dec_layers=dec)).parameters())

    layers = max(1, int(mcfg.n_layers) + int(mcfg.n_dec_layers))
    tokens = int(tcfg.batch_size) * int(mcfg.max_len)
    # per layer: ~4 copies of the [B, H, T, T] scores (scores, softmax, dropout, gradient), ~4 of [B, T, d_ff]
    acts = layers * 4 * 4 * (tokens * int(mcfg.max_len) * int(mcfg.n_heads) + tokens * int(mcfg.d_ff))
    sizes = f"d_model={mcfg.d_model}, n_layers={mcfg.n_layers}, d_ff={mcfg.d_ff}, max_len={mcfg.max_len}"
    # the activations alone first, before any module is built: max_len=10**12 made even the meta build's causal
    # mask overflow ("Storage size calculation overflowed": an internal error)
    limits.check_memory(
        acts,
        f"training this model ({sizes}, batch_size={tcfg.batch_size}: its activations alone)",
        hint="choose smaller sizes with --set",
        lower=LOWER,
    )
    # Built with at most two layers a stack and extrapolated (every layer of a stack has the same parameters):
    # built as asked, n_layers=10**30 looped for ever creating modules, before anything was counted.
    e0, d0 = min(int(mcfg.n_layers), 1), min(int(mcfg.n_dec_layers), 1)
    base = count(e0, d0)
    params = base + (int(mcfg.n_layers) - e0) * (count(e0 + 1, d0) - base)
    params += (int(mcfg.n_dec_layers) - d0) * (count(e0, d0 + 1) - base)
    limits.check_memory(
        params * 16 + acts,
        f"training this model ({params:,} parameters; {sizes}, batch_size={tcfg.batch_size})",
        hint="choose smaller sizes with --set",
        lower=LOWER,
    )
