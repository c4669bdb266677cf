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


def check_fits(weights: dict, model, files: Sequence[str | Path], run: str | Path) -> None:
    """AttnvizError unless ``weights`` (:func:`average_weights` of ``files``) are tensors of ``run``'s model, name
    for name and shape for shape: checkpoints of another run (another task or size) reached torch's
    load_state_dict, whose RuntimeError listing every missing key was an internal error."""
    own = model.state_dict()
    missing = sorted(own.keys() - weights.keys())
    extra = sorted(weights.keys() - own.keys())
    shapes = [k for k in own.keys() & weights.keys() if tuple(own[k].shape) != tuple(weights[k].shape)]
    if missing:
        why = f"it has no {missing[0]}"
    elif extra:
        why = f"it has a {extra[0]} the run's model lacks"
    elif shapes:
        k = shapes[0]
        why = f"its {k} is {list(weights[k].shape)}, the run's {list(own[k].shape)}"
    else:
        return
    raise AttnvizError(
        f"{files[0]} is not a checkpoint of the run in {run} ({why}); average checkpoints of that run "
        "(its checkpoint.safetensors, best.safetensors, snapshots/)"
    )
