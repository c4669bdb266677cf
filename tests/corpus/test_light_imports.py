"""attnviz.corpus is runtime-level: no Qt, torch or matplotlib, and Ray only when --engine ray asks for it."""

import subprocess
import sys
from pathlib import Path

BLOCK = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] in ('torch', 'PySide6', 'pyqtgraph', 'matplotlib', 'ray'):
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
"""


def test_local_corpus_run_imports_no_qt_torch_or_ray(tmp_path):
    here = Path(__file__).parent
    code = (
        BLOCK
        + f"""
sys.path.insert(0, {str(here)!r}); sys.path.insert(0, {str(here.parent)!r})
from pathlib import Path
from planted import planted_model, corpus_lines
d = Path({str(tmp_path)!r})
m = planted_model(d / 'm.onnx')
(d / 'c.txt').write_text(chr(10).join(corpus_lines(10)))
from attnviz.cli import main
assert main(['corpus', str(m), '--texts', str(d / 'c.txt'), '--out', str(d / 'out'), '--no-progress', '--workers', '1']) == 0
assert main(['corpus', str(m), '--texts', str(d / 'c.txt'), '--out', str(d / 'o2'), '--engine', 'ray', '--no-progress']) == 2
print('ok')
"""
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr
    assert "needs Ray: pip install 'ray[data]'" in out.stderr  # the missing-Ray message is one line
