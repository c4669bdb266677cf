"""A second, small virtual environment for exporting with Hugging Face optimum.

optimum-onnx 0.1 needs ``transformers<4.58`` while attnviz's tests run on transformers 5.x, so exports happen in a
venv that reuses the system torch/onnx (``--system-site-packages``) and pins only transformers + optimum-onnx.
It is built once under ``~/.cache/attnviz-tests`` (keyed on the pins and the Python version), so a fresh clone
(CI included) builds it on first use and later runs reuse it.  Exports run there through ``optimum-cli``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

PINS = ("transformers>=4.45,<4.58", "optimum-onnx==0.1.0")
CACHE = Path(os.environ.get("ATTNVIZ_TEST_CACHE", Path.home() / ".cache" / "attnviz-tests"))


def venv_dir() -> Path:
    key = hashlib.sha1((" ".join(PINS) + sys.version).encode()).hexdigest()[:10]
    return CACHE / f"optimum-venv-{key}"


def python() -> Path:
    """The venv's interpreter, building the venv first when it is missing (a few minutes, once)."""
    d = venv_dir()
    py = d / "bin" / "python"
    done = d / ".complete"
    if not done.exists():
        d.parent.mkdir(parents=True, exist_ok=True)
        venv.EnvBuilder(system_site_packages=True, clear=True, with_pip=True).create(d)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *PINS], check=True)
        done.write_text(" ".join(PINS))
    return py


def run(script: str, *args: str, timeout: int = 600) -> str:
    """Run a Python snippet inside the venv (torch single-threaded: the CI machine has 2 cores)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    env.pop("PYTHONPATH", None)
    p = subprocess.run([str(python()), "-c", script, *args], capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"optimum venv step failed:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    return p.stdout


if __name__ == "__main__":
    print(python())
