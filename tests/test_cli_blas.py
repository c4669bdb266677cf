"""The command line shortens OpenBLAS's spin before numpy loads it (cli.calm_blas): its worker threads otherwise
busy-wait ~0.1 s after every product, and an on-demand head's Q·Kᵀ at 4,096 tokens (four products, each followed
by a wait for the isolation child) cost the window 155 ms of CPU where the products took 45."""

from __future__ import annotations

import os
import subprocess
import sys

from attnviz import cli


def test_the_spin_is_shortened_unless_the_user_set_it(monkeypatch):
    monkeypatch.delenv(cli.BLAS_SPIN_ENV, raising=False)
    assert cli.main(["inspect", "no-such-model.onnx"]) == 2  # any command: set before it runs
    assert os.environ[cli.BLAS_SPIN_ENV] == cli.BLAS_SPIN == "16"
    monkeypatch.setenv(cli.BLAS_SPIN_ENV, "24")
    cli.calm_blas()
    assert os.environ[cli.BLAS_SPIN_ENV] == "24"


def test_numpy_is_not_loaded_before_main_sets_it():
    # OpenBLAS reads the variable once, when numpy loads it: `python -m attnviz` reaches cli.main first
    code = "import sys, attnviz, attnviz.cli; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
