"""The architecture's one-way rules: import-linter contracts in pyproject.toml (layers, Qt only in gui, torch only
in training, matplotlib only in figures, no cycles), and core + runtime + the CLI really run without Qt/torch/matplotlib."""

import ast
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
    "module,line,contract,where",
    [
        ("core/reduce.py", "import attnviz.gui", "layers", "core.reduce"),
        ("core/reduce.py", "import attnviz.runtime.model", "layers", "core.reduce"),
        ("runtime/graph/index.py", "import matplotlib", "matplotlib only in attnviz.figures", "runtime.graph.index"),
        ("figures/layout.py", "import PySide6", "Qt only in attnviz.gui", "figures.layout"),
        ("core/stats.py", "import torch", "torch only in attnviz.training", "core.stats"),
        # corpus: below the window, beside (not above) figures and training, no cycles among its modules
        ("corpus/fold.py", "import attnviz.gui", "layers", "corpus.fold"),
        ("corpus/run.py", "import attnviz.figures.layout", "layers", "corpus.run"),
        (
            "corpus/graph_reduce.py",
            "import attnviz.corpus.reduce",
            "import cycles",
            "No cycles are allowed in attnviz.corpus",
        ),
    ],
)
def test_a_forbidden_import_breaks_a_contract(tmp_path, module, line, contract, where):
    """The contracts can fail: one forbidden import in a copy of the package is reported as broken."""
    shutil.copytree(PKG, tmp_path / "attnviz", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PKG.parent / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "attnviz" / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    out = _lint_imports(tmp_path)
    assert out.returncode != 0
    broken = out.stdout.split("Broken contracts")[-1]
    assert contract in broken and where in broken, out.stdout[-3000:]


def private_runtime_uses(source: str) -> list[str]:
    """Where ``source`` reaches past the runtime's public surface: a private name imported from attnviz.runtime, or
    a private attribute read on anything but ``self``/``cls`` (an AST cannot tell whose object it is, so code held
    to this reads no other object's privates).  String probes (``getattr(x, "_y")``) are not followed: the
    stdlib's pool is read that way in corpus/engines.py."""

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    found = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("attnviz.runtime"):
            found += [f"l.{n.lineno}: {a.name} from {n.module}" for a in n.names if private(a.name)]
        elif isinstance(n, ast.Import):
            found += [
                f"l.{n.lineno}: import {a.name}"
                for a in n.names
                if a.name.startswith("attnviz.runtime") and any(private(p) for p in a.name.split("."))
            ]
        elif isinstance(n, ast.Attribute) and private(n.attr):
            if not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")):
                found.append(f"l.{n.lineno}: {ast.unparse(n)}")
    return found


def test_corpus_uses_only_the_public_runtime():
    """attnviz.corpus runs models through the runtime's public surface (issue 28): no private runtime names."""
    found = {p.name: private_runtime_uses(p.read_text()) for p in sorted((PKG / "corpus").glob("*.py"))}
    assert not any(found.values()), {k: v for k, v in found.items() if v}


def test_the_private_name_check_can_fail():
    probe = """
from attnviz.runtime.model import _serialize, open_model
from attnviz.corpus.fold import key_columns
import attnviz.runtime._hidden
from attnviz import __version__

def f(self, model):
    model._sites, self.model._site_map(1), model.graph_sites
    self._own, model.__class__, model.sites, getattr(model, "meta", None)
"""
    assert sorted(private_runtime_uses(probe)) == sorted(
        [
            "l.2: _serialize from attnviz.runtime.model",
            "l.4: import attnviz.runtime._hidden",
            "l.8: model._sites",
            "l.8: self.model._site_map",
        ]
    )
