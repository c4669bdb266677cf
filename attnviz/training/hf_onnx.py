"""``torch.onnx.export`` of a Hugging Face model: the wrapper, the dynamic axes, one line for what torch cannot
export, and the check's tolerance.  Shared by :mod:`attnviz.training.hf_export` (one file),
:mod:`attnviz.training.hf_speech` (a speech model's two files) and :mod:`attnviz.training.hf_vlm` (a
vision–language model's three)."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import warnings
from pathlib import Path

import numpy as np

from attnviz import AttnvizError

OPSET = 17
# The check's tolerance is relative to each map's scale: |onnx - transformers| <= ATOL + RTOL * max|transformers map|
# (outputs: the same on the output divided by its largest magnitude).  Why: a softmax weight's float error is
# p_i * (d_i - sum_j p_j d_j) for logit errors d, so it is bounded by the map's peak times the logits' error, and the
# logits' error grows with their magnitude and the model's depth.  A correct fp32 export of a peaky map (SigLIP's
# pooling head: 1.68e-4; a SigLIP with 300x query weights: 4e-4) exceeds any fixed 1e-4 while its logits are right
# to well under 1e-3.  A wrong map (another layer's, a dropped mask) misses by 1e-2 or more, so it is still refused.
ATOL = 1e-4
RTOL = 1e-3
_AXES = {
    "input_ids": {0: "batch", 1: "sequence"},
    "attention_mask": {0: "batch", 1: "sequence"},
    "token_type_ids": {0: "batch", 1: "sequence"},
    "decoder_input_ids": {0: "batch", 1: "target_sequence"},
    "pixel_values": {0: "batch"},
}


def _torch_nn_module():
    import torch

    return torch.nn.Module


class HFWrapper(_torch_nn_module()):  # type: ignore[misc]
    """Positional inputs (ONNX order) -> the HF model's keyword forward; returns one output tensor."""

    def __init__(self, model, names, output: str):
        super().__init__()
        self.model = model
        self.names = list(names)
        self.output = output

    def forward(self, *args):
        return getattr(self.model(**dict(zip(self.names, args))), self.output)


def onnx_export(
    model,
    kwargs: dict,
    output: str,
    path: Path,
    opset: int = OPSET,
    exporter: str = "legacy",
    output_axes: dict | None = None,
    module: bool = False,
    axes: dict | None = None,
    outputs: list[str] | None = None,
) -> None:
    """``torch.onnx.export`` of an HF model through :class:`HFWrapper` (inputs named as ``kwargs``' keys), or of a
    ``module`` whose forward already takes them positionally; ``axes`` replaces the default dynamic axes; a module
    returning several tensors names them all in ``outputs`` (a decoder's logits and present key/values)."""
    import torch

    names = list(kwargs)
    wrapper = model if module else HFWrapper(model, names, output).eval()
    args = tuple(kwargs[n] for n in names)
    with warnings.catch_warnings(), _c_stdout_silenced():
        warnings.simplefilter("ignore")  # tracer and legacy-exporter warnings
        if exporter == "legacy":
            if axes is None:
                axes = {n: _AXES.get(n, {0: "batch", 1: f"seq_{n}"}) for n in names if kwargs[n].ndim >= 2}
                if output_axes:
                    axes[output] = output_axes
            how: dict = dict(dynamic_axes=axes, dynamo=False)
        else:
            how = dict(dynamo=True, verbose=False)
        torch.onnx.export(
            wrapper, args, str(path), input_names=names, output_names=outputs or [output], opset_version=opset, **how
        )


@contextlib.contextmanager
def _c_stdout_silenced():
    """torch's C++ exporter logs the whole TorchScript graph (thousands of lines) to the process's stdout when an
    operator fails to export; the caller says what failed in one line, so that dump goes to /dev/null."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no stdout to silence
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


_ATEN_OP = re.compile(r"(aten::\w+|prim::\w+|onnx::\w+)")


def export_or_explain(
    model, kwargs: dict, output: str, path: Path, opset: int = OPSET, label: str | None = None, **how
) -> None:
    """:func:`onnx_export`, with torch's refusal to export an operator said in one line: which operator, and what to
    do (e.g. ``aten::histc`` in Qwen3-MoE's expert routing has no ONNX form in torch's exporter at any opset).
    ``label`` names what was being exported (a model and one of its files) instead of the module's class."""
    try:
        onnx_export(model, kwargs, output, path, opset=opset, **how)
    except AttnvizError:
        raise
    except Exception as e:
        text = " ".join(str(e).split())
        op = _ATEN_OP.search(text)
        arch = label or type(model).__name__
        if op is not None:
            raise AttnvizError(
                f"{arch}: torch cannot export the operator {op.group(1)} to ONNX (opset {opset}), so export-hf "
                "cannot export this model; export it with a newer torch or optimum-cli (eager attention) if they "
                "support it, or change the model code to avoid that operator, then open the .onnx file"
            ) from None
        raise AttnvizError(
            f"{arch}: torch.onnx.export failed ({type(e).__name__}: {text[:200]}); try another --opset, or export "
            "with optimum-cli (eager attention) and open the .onnx file"
        ) from None


def excess(got: np.ndarray, ref: np.ndarray, atol: float = ATOL, rtol: float = RTOL) -> float:
    """How far ``got`` strays beyond the tolerance ``atol + rtol * max|ref|`` (<= 0: within)."""
    return float(np.abs(got - ref).max()) - (atol + rtol * float(np.abs(ref).max()))
