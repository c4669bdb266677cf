"""Which pip extra brings an optional module, so that a command run without it says so in one line.

`pip install attnviz` brings neither torch nor safetensors; `attnviz train` without them ended "internal error
(ModuleNotFoundError: No module named 'torch'); this is a bug in attnviz, please report it", and with torch but no
safetensors only after the last training step, as it saved the checkpoint (audit25).  The commands that need an
extra check it before any work (:func:`require`); the command line's last resort names the extra for any other
import of these modules (:func:`missing_line`)."""

from __future__ import annotations

import importlib.util

# top-level module -> the extra that installs it (pyproject.toml's [project.optional-dependencies])
EXTRA_OF = {"torch": "train", "safetensors": "train", "transformers": "hf", "ray": "ray"}
# torch from PyTorch's CPU index first: a plain `pip install torch` on Linux pulls GBs of CUDA wheels
TORCH_FIRST = "torch first from PyTorch's CPU index, as the README's Quick start shows"


# a command whose extra brings more than the module's own (export-hf: torch and transformers, the `hf` extra)
EXTRA_OF_COMMAND = {"export-hf": "hf"}


def _advice(command: str, module: str) -> str:
    extra = EXTRA_OF_COMMAND.get(command, EXTRA_OF[module])
    torch = f" ({TORCH_FIRST})" if extra in ("train", "hf") else ""
    return f"'attnviz {command}' needs {module}, which is not installed: pip install 'attnviz[{extra}]'{torch}"


def missing_line(command: str, error: ModuleNotFoundError) -> str | None:
    """The one line for ``error`` when it is an optional module of :data:`EXTRA_OF` that is not installed, else None
    (a module missing for another reason is a bug to report, not an install step)."""
    module = (error.name or "").split(".")[0]
    return _advice(command, module) if module in EXTRA_OF else None


def require(command: str, *modules: str) -> None:
    """Refuse ``command`` in one line, before any work, when one of ``modules`` (keys of :data:`EXTRA_OF`) is not
    installed."""
    from attnviz import AttnvizError

    for module in modules:
        if importlib.util.find_spec(module) is None:
            raise AttnvizError(_advice(command, module))
