"""A command run without the pip extra it needs says which in one line, exit 2: `pip install attnviz` brings no torch,
and `attnviz train` ended "internal error (ModuleNotFoundError: No module named 'torch'); this is a bug in attnviz";
with torch but no safetensors it trained to the last step and then failed the same way (audit25, a fresh venv).
Each case runs the command in a fresh interpreter where the module cannot be imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnviz.core.extras import missing_line

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "models" / "sequence-classification.onnx"


def run_without(modules: list[str], *argv) -> subprocess.CompletedProcess:
    code = (
        "import sys\n"
        f"for m in {modules!r}: sys.modules[m] = None  # `import m` raises ModuleNotFoundError, as when not installed\n"
        "from attnviz.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, argv)], env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("module", ["torch", "safetensors"])
def test_train_without_its_extra_is_refused_before_any_work(tmp_path, module):
    out = tmp_path / "run"
    done = run_without([module], "train", "sequence-classification", "--preset", "tiny", "--steps", "2", "--out", out)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert lines[0] == (
        f"attnviz: error: 'attnviz train' needs {module}, which is not installed: pip install 'attnviz[train]' "
        "(torch first from PyTorch's CPU index, as the README's Quick start shows)"
    )
    assert "training" not in done.stdout and not out.exists()  # not a step trained, no folder made


def test_eval_of_an_exported_model_needs_no_torch():
    """`attnviz eval` scores an exported model with onnxruntime alone: without torch it runs (it imported torch for
    names it read from the config, and ended in the last resort's "needs torch" line).  That last resort, for a
    command with no check of its own, is export-hf's case below."""
    if not DEMO.exists():
        pytest.skip("the sequence-classification demo is not in this checkout")
    done = run_without(["torch"], "eval", DEMO, "--n", "2")
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
    assert '"task": "sequence-classification"' in done.stdout and '"n": 2' in done.stdout, done.stdout[-2000:]


def test_export_hf_names_its_own_extra(tmp_path):
    done = run_without(["torch"], "export-hf", tmp_path, "--out", tmp_path / "x")
    assert done.returncode == 2 and "pip install 'attnviz[hf]'" in done.stderr.strip().splitlines()[-1], done.stderr


def test_another_missing_module_is_still_a_bug_to_report():
    """Only the extras' modules are install steps; any other module missing is attnviz's fault and says so."""
    assert missing_line("inspect", ModuleNotFoundError("No module named 'numpy'", name="numpy")) is None
    assert missing_line("corpus", ModuleNotFoundError("x", name="ray.data")) is not None  # a submodule of an extra's
