"""core and runtime work without Qt and torch; only attnviz.gui imports Qt (the architecture's one-way rule)."""

import ast
import subprocess
import sys
from pathlib import Path

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
    code = BLOCK + f"""
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
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_only_gui_imports_qt_and_core_runtime_no_torch():
    for f in PKG.rglob("*.py"):
        rel = f.relative_to(PKG).parts
        mods = _imports(f)
        if rel[0] != "gui":
            assert not mods & {"PySide6", "pyqtgraph", "shiboken6"}, f
        if rel[0] in ("core", "runtime", "figures"):
            assert "torch" not in mods, f
        if rel[0] == "core":
            assert not mods & {"onnx", "onnxruntime", "matplotlib"}, f
