"""The architecture's one-way rules: import-linter contracts in pyproject.toml (layers, Qt only in gui, torch only
in training, matplotlib only in figures, no cycles), and core + runtime + the CLI really run without Qt/torch/matplotlib."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "attnviz"

BLOCK = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] in ('torch', 'PySide6', 'pyqtgraph', 'matplotlib'):
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
"""


def test_runtime_runs_without_qt_torch_matplotlib(tmp_path):
    code = (
        BLOCK
        + f"""
sys.path.insert(0, {str(Path(__file__).parent)!r})
from onnx_builders import tiny_text_model
import attnviz.core, attnviz.runtime
from attnviz.cli import main
p = tiny_text_model(__import__('pathlib').Path({str(tmp_path)!r}) / 'm.onnx')
r = attnviz.runtime.open_model(p, provider='cpu').analyze(text='the cat sat')
assert len(r.maps) == 2
assert main(['inspect', str(p)]) == 0
print('ok')
"""
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    """Run import-linter on the package and contracts under ``root`` (its pyproject.toml)."""
    pytest.importorskip("importlinter")
    env = {**os.environ, "PYTHONPATH": str(root)}  # this checkout's package, before any installed copy
    exe = shutil.which("lint-imports") or "lint-imports"
    return subprocess.run([exe, "--no-cache"], cwd=root, capture_output=True, text=True, timeout=300, env=env)


def test_import_contracts_hold():
    out = _lint_imports(PKG.parent)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


@pytest.mark.parametrize(
    "module,line,contract",
    [
        ("core/reduce.py", "import attnviz.gui", "layers"),
        ("core/reduce.py", "import attnviz.runtime.model", "layers"),
        ("runtime/graph/index.py", "import matplotlib", "matplotlib only in attnviz.figures"),
        ("figures/layout.py", "import PySide6", "Qt only in attnviz.gui"),
        ("core/stats.py", "import torch", "torch only in attnviz.training"),
    ],
)
def test_a_forbidden_import_breaks_a_contract(tmp_path, module, line, contract):
    """The contracts can fail: one forbidden import in a copy of the package is reported as broken."""
    shutil.copytree(PKG, tmp_path / "attnviz", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PKG.parent / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "attnviz" / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    out = _lint_imports(tmp_path)
    assert out.returncode != 0
    broken = out.stdout.split("Broken contracts")[-1]
    assert contract in broken and module.replace("/", ".").removesuffix(".py") in broken, out.stdout[-3000:]
