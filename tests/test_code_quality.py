"""The code-quality gates a contributor runs before a commit (see .pre-commit-config.yaml), as tests:
``ruff check`` and ``ruff format --check`` over the whole tree, ``mypy`` over the package, with the
settings in pyproject.toml."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def _tool(name: str) -> str:
    exe = shutil.which(name)
    if exe is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return exe


def test_ruff_lint_is_clean():
    out = _run(_tool("ruff"), "check", "--no-cache", ".")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-1000:]


def test_ruff_format_is_applied():
    out = _run(_tool("ruff"), "format", "--check", "--no-cache", ".")
    assert out.returncode == 0, "run `ruff format .`:\n" + out.stdout[-4000:] + out.stderr[-1000:]


def test_mypy_is_clean():
    _tool("mypy")
    out = _run(sys.executable, "-m", "mypy")  # incremental: .mypy_cache makes reruns fast
    assert out.returncode == 0 and "Success" in out.stdout, out.stdout[-4000:] + out.stderr[-1000:]


def test_the_gates_can_fail(tmp_path):
    """The same settings reject an unused import, an unformatted line and a type error."""
    ruff = _tool("ruff")
    _tool("mypy")
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\n\ndef f(x: int) -> str:\n    return x+1\n")
    cfg = ["--config", str(ROOT / "pyproject.toml")]
    assert (
        "F401" in subprocess.run([ruff, "check", *cfg, "--no-cache", str(bad)], capture_output=True, text=True).stdout
    )
    assert subprocess.run([ruff, "format", *cfg, "--check", str(bad)], capture_output=True, text=True).returncode != 0
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--no-incremental",
            "--cache-dir",
            "/dev/null",
            str(bad),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert "Incompatible return value type" in out.stdout
