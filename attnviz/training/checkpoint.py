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

import os
import tempfile
from pathlib import Path

from attnviz import AttnvizError
from attnviz.core import writes
from attnviz.core.untrusted import read_json

TENSORS = "checkpoint.safetensors"
STATE = "checkpoint.json"
CONFIG = "config.json"
MODEL = "model.onnx"  # what `attnviz train` exports from a finished run


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Checkpoint files reach the disk (fsync) before the rename publishes them."""
    writes.atomic_write_bytes(path, data, "--out", sync=True)


def atomic_write_json(path: Path, obj) -> None:
    writes.atomic_write_json(path, obj, "--out", sync=True)


def check_run_folder(out: str | os.PathLike, task: str) -> None:
    """``train --out`` may only resume a run there (the trainer checks its configuration matches) or start in an
    empty folder; anything else — another run's exported files, the user's own files — is refused, never replaced."""
    out = Path(out)
    if not out.exists():
        return
    if not out.is_dir():
        raise AttnvizError(f"--out {out} is a file, not a run folder; choose a folder name")
    names = {p.name for p in out.iterdir()}
    if not names or STATE in names:
        return  # empty, or a checkpoint whose task and configuration the trainer compares before resuming
    if names == {CONFIG}:  # a run interrupted before its first checkpoint: resume only the same task
        try:
            same = read_json(out / CONFIG, "run config").get("task") == task
        except (ValueError, AttributeError, AttnvizError):
            same = False
        if same:
            return
    shown = ", ".join(sorted(names)[:4]) + (", ..." if len(names) > 4 else "")
    raise AttnvizError(
        f"--out {out} is not empty ({shown}) and holds no run to resume; "
        "choose an empty folder or pass --overwrite to replace it"
    )


def ensure_writable_dir(out: str | Path) -> Path:
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
            tensors[f"optim.{idx}.{key}"] = (
                t.detach().contiguous().cpu().reshape(-1) if t.dim() == 0 else t.detach().contiguous().cpu()
            )
    atomic_write_bytes(Path(out) / TENSORS, st_save(tensors, metadata={"step": str(step), "format": "attnviz-1"}))
    atomic_write_json(Path(out) / STATE, {**state, "step": step})


def load_state(out: Path) -> dict | None:
    """``checkpoint.json`` of a run folder, or None when there is none."""
    p = Path(out) / STATE
    if not os.path.lexists(p):
        return None
    state = read_json(p, "checkpoint", fix="the checkpoint is corrupt: delete it or pass --restart")
    # a checkpoint.json holding null or a list must not read as "no checkpoint" (that silently retrained over it)
    if not isinstance(state, dict) or not isinstance(state.get("step"), int) or state["step"] < 0:
        raise AttnvizError(f"checkpoint {p} is corrupt (no step count in it); delete it or pass --restart") from None
    why = _state_problem(state)
    if why:
        raise AttnvizError(f"checkpoint {p} is corrupt ({why}); delete it or pass --restart")
    return state


def _state_problem(state: dict) -> str | None:
    """What is wrong with the fields a resumed run uses (a hand-edited or damaged checkpoint.json), or None.  Each
    reached the loop as an internal error: ``"losses": "x"`` an IndexError, ``"best": [1]`` a TypeError, a best
    without its step a KeyError."""
    from attnviz.core.json_types import fits, shown

    def number(x) -> bool:  # NaN included: a diverged run's losses and best value are NaN, and resume as such
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    losses = state.get("losses", [])
    if not (
        isinstance(losses, list) and all(isinstance(p, list) and len(p) == 2 and all(map(number, p)) for p in losses)
    ):
        return f"its losses are {shown(losses)}, not a list of [step, loss] pairs"
    best = state.get("best")
    if best is not None and not (
        isinstance(best, dict)
        and fits(best.get("step"), int)
        and best["step"] >= 0
        and number(best.get("value"))
        and fits(best.get("key"), str)
        and isinstance(best.get("metrics"), dict)
    ):
        return f"its best is {shown(best)}, not a best validation step (step, value, key, metrics)"
    if state.get("metrics") is not None and not isinstance(state["metrics"], dict):
        return f"its metrics are {shown(state['metrics'])}, not an object"
    if not fits(state.get("finished", False), bool):
        return f"its finished is {shown(state['finished'])}, not true or false"
    return None


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
        raise AttnvizError(
            f"checkpoint {p} is corrupt or unreadable ({str(e).splitlines()[0][:120]}); {hint}"
        ) from None
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


BEST = "best.safetensors"  # the weights of the best validation step (TrainConfig.validation)


def save_best(out: Path, model, step: int) -> None:
    save_weights(Path(out) / BEST, model, step)


SNAPSHOTS = "snapshots"  # folder of weight snapshots (TrainConfig.snapshot_every), for checkpoint averaging


def snapshot_path(out: Path, step: int) -> Path:
    return Path(out) / SNAPSHOTS / f"step-{step:06d}.safetensors"


def save_snapshot(out: Path, model, step: int) -> None:
    (Path(out) / SNAPSHOTS).mkdir(exist_ok=True)
    save_weights(snapshot_path(out, step), model, step)


def save_weights(path: Path, model, step: int) -> None:
    """Model tensors only (``model.*``, the same names as a checkpoint), the step in the header."""
    from safetensors.torch import save as st_save

    tensors = {f"model.{k}": v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    atomic_write_bytes(path, st_save(tensors, metadata={"step": str(step), "format": "attnviz-1"}))


def load_best(out: Path, model, step: int) -> None:
    """Restore the best validation step's weights; AttnvizError when the file is missing or from another step."""
    from safetensors import safe_open

    p = Path(out) / BEST
    try:
        with safe_open(str(p), framework="pt") as f:
            meta = f.metadata() or {}
            sd = {k[len("model.") :]: f.get_tensor(k) for k in f.keys() if k.startswith("model.")}
    except Exception as e:  # missing, truncated or garbled
        raise AttnvizError(
            f"best-validation weights {p} are unreadable ({str(e).splitlines()[0][:120]}); "
            "pass --restart to train again"
        ) from None
    if meta.get("step") != str(step):
        raise AttnvizError(
            f"{p} is from step {meta.get('step')} but {STATE} says the best step is {step}; "
            "pass --restart to train again"
        )
    model.load_state_dict(sd, strict=True)
