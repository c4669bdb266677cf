"""Checkpoint averaging: the element-wise mean of the weights of several checkpoints of one model.

A standard trick of neural machine translation (Vaswani et al. 2017 averaged the last 5–20 checkpoints; Popel &
Bojar 2018): checkpoints a few hundred steps apart lie in one basin, and their mean usually scores at least as well
as each one while smoothing the step-to-step noise of the last updates.  The inputs are safetensors files with
``model.*`` tensors (``checkpoint.safetensors``, ``best.safetensors``, ``snapshots/step-*.safetensors`` written
with ``TrainConfig.snapshot_every``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from attnviz import AttnvizError
from attnviz.core.untrusted import regular_file
from attnviz.training import checkpoint as ckpt


def average_weights(files: Sequence[str | Path]) -> dict:
    """``{name: tensor}``, the mean of the files' model tensors (float32 sums; integer buffers must agree)."""
    import torch

    if not files:
        raise AttnvizError("checkpoint averaging needs at least one weights file")
    total: dict | None = None
    first = Path(files[0])
    for f in files:  # regular files first: a FIFO was waited on for ever, a device or folder got the OS's errno
        regular_file(f, "cannot read weights")
    for f in files:
        try:
            sd = ckpt.read_weights(Path(f))
        except Exception:  # truncated or not safetensors: safetensors' Rust words ("header too small") said nothing
            raise AttnvizError(
                f"cannot read weights {f}: not a safetensors checkpoint (damaged, cut short or another format); "
                "pass checkpoint files"
            ) from None
        if not sd:
            raise AttnvizError(f"{f} holds no model tensors (model.*); pass checkpoint or snapshot files")
        if total is None:
            total = {k: v.to(torch.float64) if v.is_floating_point() else v.clone() for k, v in sd.items()}
            continue
        if sd.keys() != total.keys() or any(sd[k].shape != total[k].shape for k in sd):
            raise AttnvizError(f"{f} is not a checkpoint of the same model as {first}; average one model's checkpoints")
        for k, v in sd.items():
            if v.is_floating_point():
                total[k] += v.to(torch.float64)
            elif not torch.equal(v, total[k]):
                raise AttnvizError(
                    f"{f} differs from {first} in the integer buffer {k}; average one model's checkpoints"
                )
    assert total is not None
    ref = ckpt.read_weights(first)  # the dtype each tensor had
    return {k: (v / len(files)).to(ref[k].dtype) if v.is_floating_point() else v for k, v in total.items()}
