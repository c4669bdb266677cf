"""Checkpoints: safetensors for tensors + JSON for configs and progress; no pickles, atomic writes.

A run folder holds

* ``config.json`` – ``{"task", "model", "train"}``, written when the run starts;
* ``checkpoint.safetensors`` – ``model.*`` parameters and ``optim.*`` AdamW state, with ``{"step": ...}``
  in the safetensors header;
* ``checkpoint.json`` – ``{"step", "total", "task", "model", "train", "finished", "losses"}``, written
  after the tensors, so a crash between the two leaves an older, still consistent pair (the step in the
  tensor header must match).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from attnviz import AttnvizError

TENSORS = "checkpoint.safetensors"
STATE = "checkpoint.json"
CONFIG = "config.json"


def _umask_mode() -> int:
    um = os.umask(0)
    os.umask(um)
    return 0o666 & ~um


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix="." + path.name + ".", suffix=".tmp", dir=path.parent)
    os.chmod(tmp, _umask_mode())  # mkstemp makes 0600; published files get the usual permissions
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path: Path, obj) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2) + "\n").encode())


def temp_path(path: Path) -> Path:
    """A fresh temp file name in ``path``'s folder (same file system, so ``os.replace`` is atomic)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix="." + path.stem + ".", suffix=path.suffix + ".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, _umask_mode())
    return Path(tmp)


def ensure_writable_dir(out: Path) -> Path:
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test.", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise AttnvizError(f"cannot write to output folder {out}: {e.strerror or e}; pick another --out") from None
    return out


def save(out: Path, model, optimizer, step: int, state: dict) -> None:
    import torch
    from safetensors.torch import save as st_save

    tensors = {f"model.{k}": v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    opt = optimizer.state_dict()
    for idx, st in opt["state"].items():
        for key, v in st.items():
            t = v if torch.is_tensor(v) else torch.tensor(float(v))
            tensors[f"optim.{idx}.{key}"] = t.detach().contiguous().cpu().reshape(-1) if t.dim() == 0 else t.detach().contiguous().cpu()
    atomic_write_bytes(Path(out) / TENSORS, st_save(tensors, metadata={"step": str(step), "format": "attnviz-1"}))
    atomic_write_json(Path(out) / STATE, {**state, "step": step})


def load_state(out: Path) -> dict | None:
    """``checkpoint.json`` of a run folder, or None when there is none."""
    p = Path(out) / STATE
    if not p.exists():
        return None
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise AttnvizError(f"checkpoint {p} is corrupt ({e}); delete it or pass --restart") from None


def load_tensors(out: Path, model, optimizer, step: int) -> None:
    """Fill ``model`` and ``optimizer`` from the checkpoint; AttnvizError when it is unreadable or inconsistent."""
    from safetensors import safe_open

    p = Path(out) / TENSORS
    hint = "delete it or pass --restart to train from scratch"
    try:
        with safe_open(str(p), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # safetensors raises its own error types for truncated/garbled files
        raise AttnvizError(f"checkpoint {p} is corrupt or unreadable ({str(e).splitlines()[0][:120]}); {hint}") from None
    if meta.get("step") != str(step):
        raise AttnvizError(f"checkpoint {p} is at step {meta.get('step')} but {STATE} says {step}; {hint}")
    sd = {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}
    try:
        model.load_state_dict(sd, strict=True)
    except RuntimeError as e:
        raise AttnvizError(f"checkpoint {p} does not fit the model ({str(e).splitlines()[0][:120]}); {hint}") from None
    opt = optimizer.state_dict()
    state: dict = {}
    for k, v in tensors.items():
        if k.startswith("optim."):
            _, idx, key = k.split(".", 2)
            state.setdefault(int(idx), {})[key] = v.reshape(()) if key == "step" else v
    opt["state"] = state
    try:
        optimizer.load_state_dict(opt)
    except (ValueError, RuntimeError, KeyError) as e:
        raise AttnvizError(f"checkpoint {p}: optimizer state does not fit ({e}); {hint}") from None


def read_weights(path: Path) -> dict:
    """Model tensors of a checkpoint file (for rebuilding a model outside training)."""
    from safetensors.torch import load_file

    return {k[len("model.") :]: v for k, v in load_file(str(path)).items() if k.startswith("model.")}
