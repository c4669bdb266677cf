"""What an exported model says of its training: :func:`read_config`, without torch.

Apart from :mod:`attnviz.training.export` (which imports torch for the export and its parity check) so that
``attnviz eval`` of an ONNX model, which runs it with onnxruntime alone, does not import torch: 1.6 s of CPU a
command before a line was printed, a refused model file's too.
"""

from __future__ import annotations

from pathlib import Path

from attnviz import AttnvizError
from attnviz.core import metadata as meta_keys
from attnviz.training import budget
from attnviz.training.config import ModelConfig, TrainConfig


def read_config(path: str | Path) -> tuple[str, ModelConfig, TrainConfig, dict]:
    """(task name, ModelConfig, TrainConfig, parsed attnviz metadata) of an exported model."""
    import onnx

    from attnviz.core.untrusted import read_bytes

    # a regular file only, read by the guard: onnx.load of a FIFO waited for a writer for ever, /dev/zero never ended
    if not Path(path).exists() and not Path(path).is_symlink():  # (a dangling link: the guard names the link)
        raise AttnvizError(f"no such model file: {path}")
    data = read_bytes(path, "model")
    try:
        m = onnx.load_model_from_string(data)
    except Exception as e:  # protobuf DecodeError etc.
        raise AttnvizError(
            f"{path} is not a readable ONNX file ({type(e).__name__}); re-export it with 'attnviz train'"
        ) from None
    meta = meta_keys.parse({p.key: p.value for p in m.metadata_props})
    cfg = meta.get("config")
    if not isinstance(cfg, dict) or "model" not in cfg or "train" not in cfg:
        raise AttnvizError(
            f"{path} has no attnviz training config in its metadata; "
            "'attnviz eval' only scores models exported by 'attnviz train'"
        )
    if not isinstance(cfg["model"], dict) or not isinstance(cfg["train"], dict):
        raise AttnvizError(
            f"{path}: the attnviz config in its metadata is malformed; re-export it with 'attnviz train'"
        )
    budget.check_sizes(cfg["model"], cfg["train"])  # before the dataclasses divide by n_heads or patch_size
    try:
        mcfg, tcfg = ModelConfig.from_dict(cfg["model"]), TrainConfig.from_dict(cfg["train"])
    except (TypeError, ValueError) as e:  # a field of the wrong type (align_heads, arch given as a list...)
        raise AttnvizError(f"{path}: the attnviz config in its metadata is malformed ({e}); re-export it") from None
    budget.check_eval(mcfg, tcfg)  # the metadata is untrusted text: nothing of its sizes is built yet
    return (
        str(meta.get("task", cfg.get("task", ""))),
        mcfg,
        tcfg,
        meta,
    )
