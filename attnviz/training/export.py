"""Export a trained model to a self-describing ONNX file and check it against PyTorch.

Exporter choice: the TorchScript-based exporter (``torch.onnx.export(..., dynamo=False)``, opset 17).  For
these models it is the robust one: about a second per model, dynamic batch/sequence axes from
``dynamic_axes``, and node names that keep the module path (``/model/encoder/layers.0/self_attn/Softmax``),
which attnviz's engine reads as a layer hint.  The dynamo exporter keeps scopes only in metadata and loses
them when it down-converts to opset 17 (see shared/reference/onnx-attention-findings.md).

The graph's outputs are ``logits`` only; attention probabilities stay internal ``Softmax`` tensors that the
engine finds.  After export, :func:`check_parity` compares onnxruntime's logits with PyTorch's and every
attention map the engine extracts (:func:`attnviz.runtime.open_model`) with the model's own probabilities.
Nothing is written at ``path`` unless the check passes (``core.writes.atomic_path``).
"""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path

import numpy as np

from attnviz import AttnvizError, __version__
from attnviz.core import metadata as meta_keys
from attnviz.core.writes import atomic_path
from attnviz.training.config import ModelConfig, TrainConfig
from attnviz.training.exported import read_config  # noqa: F401  (its callers import it from here too)
from attnviz.training.layout import ROLES, input_names
from attnviz.training.runners import OnnxRunner, TorchRunner

OPSET = 17
ATOL = 1e-4  # absolute tolerance on logits and probabilities (float32, different kernels)

_AXES = {
    "input_ids": {0: "batch", 1: "sequence"},
    "attention_mask": {0: "batch", 1: "sequence"},
    "series": {0: "batch", 1: "sequence"},
    "pixel_values": {0: "batch"},
    "decoder_input_ids": {0: "batch", 1: "target_sequence"},
}


def _logit_axes(mcfg: ModelConfig) -> dict:
    if mcfg.arch in ("encoder-decoder", "image-decoder"):
        return {0: "batch", 1: "target_sequence"}
    if mcfg.head == "lm" and mcfg.arch in ("encoder", "decoder"):
        return {0: "batch", 1: "sequence"}
    return {0: "batch"}


def _wrap(model, names):
    import torch

    class Exported(torch.nn.Module):
        """Positional inputs in ONNX order -> the model's keyword forward; returns logits only."""

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            return self.model(**dict(zip(names, args)))

    return Exported()


def extra_class_names(have: int, n_classes: int) -> list[str]:
    """Names for a classifier's logits past its task's labels (no example has those classes)."""
    return [f"class {i}" for i in range(have, n_classes)]


def build_metadata(task, mcfg: ModelConfig, tcfg: TrainConfig, metrics: dict | None) -> dict:
    names = input_names(mcfg)
    meta = {
        "task": task.name,
        "inputs": {n: ROLES[n] for n in names},
        "config": {"task": task.name, "model": mcfg.to_dict(), "train": tcfg.to_dict(), "attnviz": __version__},
    }
    meta.update(task.metadata(mcfg))
    labels = meta.get("labels")
    if mcfg.head == "classify" and isinstance(labels, list) and mcfg.n_classes > len(labels):
        # `--set n_classes=3` on a two-label task: the viewer reads one name per logit (else it mislabels or refuses)
        meta["labels"] = [*labels, *extra_class_names(len(labels), mcfg.n_classes)]
    # guided heads: a translator's word aligners, a captioner's pointers (each object word's row onto its box);
    # the window opens Alignment / Image regions on the first
    if tcfg.align_weight and mcfg.arch in ("encoder-decoder", "image-decoder"):
        # the heads trained as aligners, best first: by the validation split when the run had one (so the test
        # split selects nothing), else by the held-out metrics
        heads = [list(h) for h in tcfg.align_heads]
        val = ((metrics or {}).get("validation") or {}).get("metrics") or {}
        declared = val.get("aer_declared") or (metrics or {}).get("aer_declared")
        if declared and len(declared.get("aer", [])) == len(heads):
            heads = [h for _, h in sorted(zip(declared["aer"], heads))]
        meta["alignment"] = {"heads": heads, "convention": tcfg.align_convention}
    if metrics is not None:
        meta["metrics"] = metrics
    return meta


def write_metadata(path: Path, meta: dict) -> None:
    import onnx

    m = onnx.load(str(path))
    del m.metadata_props[:]
    for k, v in meta_keys.dump(meta).items():
        p = m.metadata_props.add()
        p.key, p.value = k, v
    m.producer_name = "attnviz"
    m.producer_version = __version__
    m.doc_string = f"attnviz {meta.get('task', '')} model ({meta['config']['model']['arch']})"
    onnx.save(m, str(path))


def export_graph(model, mcfg: ModelConfig, feeds: dict[str, np.ndarray], path: Path) -> None:
    """``torch.onnx.export`` of ``model`` (CPU, eval mode) to ``path``; graph output ``logits`` first."""
    import torch

    names = input_names(mcfg)
    m = copy.deepcopy(model).cpu().eval()
    args = tuple(torch.as_tensor(np.asarray(feeds[n])) for n in names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # legacy-exporter deprecation and tracer warnings
        torch.onnx.export(
            _wrap(m, names),
            args,
            str(path),
            input_names=list(names),
            output_names=["logits"],
            dynamic_axes={**{n: _AXES[n] for n in names}, "logits": _logit_axes(mcfg)},
            opset_version=OPSET,
            dynamo=False,
            do_constant_folding=True,
        )


def check_parity(path: Path, model, feeds: dict[str, np.ndarray], atol: float = ATOL) -> dict:
    """ONNX vs PyTorch on logits and every attention map; raises AttnvizError on a mismatch."""
    onnx_run = OnnxRunner(str(path))
    torch_run = TorchRunner(copy.deepcopy(model).cpu().eval(), device="cpu")
    lo, lt = onnx_run.logits(feeds), torch_run.logits(feeds)
    if lo.shape != lt.shape:
        raise AttnvizError(f"export check failed: ONNX logits {lo.shape} vs PyTorch {lt.shape}")
    logit_diff = float(np.abs(lo - lt).max())
    ref = torch_run.attention(feeds)
    # the engine (attnviz.runtime, always installed with attnviz) finds and labels the maps: checking through
    # it is what proves the viewer will show this model's attention
    engine = "attnviz.runtime"
    res = onnx_run.attention_result(feeds)
    got = [m.array() for m in res.maps]
    layout = [(s.stack, s.kind, s.layer) for s in res.sites]
    if len(got) != len(ref):
        raise AttnvizError(
            f"export check failed: the engine found {len(got)} attention sites, the model has {len(ref)}"
        )
    expected = [tuple(x) for x in model.attention_layout()]
    if layout != expected:
        raise AttnvizError(f"export check failed: the engine labels the sites {layout}, the model has {expected}")
    attn_diff = 0.0
    for i, (g, r) in enumerate(zip(got, ref)):
        if g.shape != r.shape:
            raise AttnvizError(
                f"export check failed: attention site {i} has shape {g.shape} in ONNX, {r.shape} in PyTorch"
            )
        attn_diff = max(attn_diff, float(np.abs(g - r).max()))
    report = {"logits_max_diff": logit_diff, "attention_max_diff": attn_diff, "sites": len(ref), "engine": engine}
    if logit_diff > atol * max(1.0, float(np.abs(lt).max())) or attn_diff > atol:
        raise AttnvizError(f"export check failed: ONNX and PyTorch differ ({json.dumps(report)})")
    return report


def export(
    model,
    task,
    mcfg: ModelConfig,
    tcfg: TrainConfig,
    path: str | Path,
    metrics: dict | None = None,
    evaluate: bool = False,
    check: bool = True,
    validation: dict | None = None,
) -> dict:
    """Export, optionally measure held-out metrics on the ONNX file, write metadata, check, then publish.

    Returns ``{"path", "metrics", "parity"}``.  ``evaluate=True`` measures ``task.evaluate`` with
    onnxruntime (what ``attnviz eval`` prints) and stores it as ``attnviz.metrics``.
    """
    path = Path(path)
    if not path.parent.is_dir():
        raise AttnvizError(f"output folder {path.parent} does not exist; create it or choose another --out")
    feeds = task.example_feeds(mcfg, tcfg)
    with atomic_path(path, "--out") as tmp:  # published only when every check passed
        export_graph(model, mcfg, feeds, tmp)
        if evaluate:
            metrics = task.evaluate(OnnxRunner(str(tmp)), task.make_split("test", mcfg, tcfg), mcfg)
        if validation is not None:  # the best validation step (TrainConfig.validation), kept beside the test metrics
            metrics = {**(metrics or {}), "validation": validation}
        write_metadata(tmp, build_metadata(task, mcfg, tcfg, metrics))
        parity = check_parity(tmp, model, feeds) if check else None
    return {"path": str(path), "metrics": metrics, "parity": parity}
