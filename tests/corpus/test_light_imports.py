"""attnviz.corpus is runtime-level: no Qt, torch or matplotlib, and Ray only when --engine ray asks for it."""

import os
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
# pyarrow.Table.from_pylist would import pandas (~0.2 s, and its teardown at exit): corpus/columns.py builds the
# same tables without it
assert 'pandas' not in sys.modules
assert 'tqdm' not in sys.modules  # --no-progress: no bar to draw
# a text corpus's driver loads nothing of the other corpus kinds (source/target pairs, recordings) nor of
# vision-language sets, and its fold sorts no ids (np.unique imported numpy.ma): each was ~1-5 ms of its CPU
light = ('attnviz.corpus.pairs', 'attnviz.corpus.gold', 'attnviz.corpus.audio_items', 'attnviz.runtime.vlm', 'numpy.ma')
assert not [m for m in light if m in sys.modules], [m for m in light if m in sys.modules]
assert main(['corpus', str(m), '--texts', str(d / 'c.txt'), '--out', str(d / 'o2'), '--engine', 'ray', '--no-progress']) == 2
print('ok')
"""
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr
    assert "needs Ray: pip install 'ray[data]'" in out.stderr  # the missing-Ray message is one line


def test_a_second_text_corpus_command_reads_its_model_without_onnx(tmp_path):
    """The first command kept what its driver read of the model (runtime/model_summary.py); the second one's
    driver (a fresh process) imports no onnx and no model code, and writes the same bytes."""
    here = Path(__file__).parent
    code = f"""
import sys
sys.path.insert(0, {str(here)!r}); sys.path.insert(0, {str(here.parent)!r})
from pathlib import Path
from attnviz.cli import main
d = Path({str(tmp_path)!r})
if sys.argv[1] == 'make':
    from planted import planted_model, corpus_lines
    planted_model(d / 'm.onnx')
    (d / 'c.txt').write_text(chr(10).join(corpus_lines(40)))
out = d / sys.argv[1]
assert main(['corpus', str(d / 'm.onnx'), '--texts', str(d / 'c.txt'), '--out', str(out), '--no-progress', '--workers', '2', '--provider', 'cpu', '--batch-size', '8']) == 0
print([m for m in ('onnx', 'attnviz.runtime.model', 'attnviz.runtime.folder', 'attnviz.runtime.host') if m in sys.modules])
"""
    runs = {}
    env = {**os.environ, "ATTNVIZ_CACHE_DIR": str(tmp_path / "cache")}  # nothing kept by another test's commands
    for name in ("make", "again"):
        out = subprocess.run(
            [sys.executable, "-c", code, name], capture_output=True, text=True, timeout=180, check=False, env=env
        )
        assert out.returncode == 0, out.stderr
        runs[name] = out.stdout.strip().splitlines()[-1]
    assert "'onnx', 'attnviz.runtime.model'" in runs["make"]  # the first one opened the model (and described it)
    assert runs["again"] == "[]"
    for f in ("heads.parquet", "examples.parquet"):
        assert (tmp_path / "make" / f).read_bytes() == (tmp_path / "again" / f).read_bytes()


def test_reading_corpus_results_and_a_parquet_corpus_imports_no_pandas(tmp_path):
    """pyarrow's read_table imports pandas (about a second cold) where ParquetFile does not: opening results in the
    window and reading a .parquet corpus must not pay for it (checked in a fresh process).  Both read back what was
    written, and a file without a "text" column is one line naming the columns it has."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from planted import corpus_lines, planted_model

    from attnviz.cli import main

    pq.write_table(pa.table({"text": ["a b", " ", "c"], "en": ["x", "y", "z"]}), tmp_path / "c.parquet")
    pq.write_table(pa.table({"words": ["a"]}), tmp_path / "w.parquet")
    m = planted_model(tmp_path / "m.onnx")
    (tmp_path / "c.txt").write_text("\n".join(corpus_lines(10)))
    argv = ["corpus", str(m), "--texts", str(tmp_path / "c.txt"), "--out", str(tmp_path / "out"), "--no-progress"]
    assert main([*argv, "--workers", "1"]) == 0
    code = f"""
import sys
from pathlib import Path
from attnviz.corpus import items, output
d = Path({str(tmp_path)!r})
got = items.read_texts(d / "c.parquet", pair_column="en")
assert [(i.text, i.pair) for i in got] == [("a b", "x"), ("c", "z")], got
res = output.read(d / "out")
assert res.heads and res.examples
try:
    items.read_texts(d / "w.parquet")
except Exception as e:
    print(e)
print("pandas" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"  # pandas was never imported
    assert "w.parquet: cannot read a \"text\" column (no column 'text'; the file has words)" in out.stdout


def test_run_json_reads_onnxruntime_version_without_importing_it():
    """The driver's sessions live in other processes: run.json's onnxruntime version is read from the package
    (~0.1 s CPU less a command), and it is the version the imported module then reports."""
    code = """
import sys
from attnviz.corpus.run import _versions
v = _versions('local')['onnxruntime']
assert 'onnxruntime' not in sys.modules
import onnxruntime
assert v == onnxruntime.__version__, (v, onnxruntime.__version__)
print('ok')
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr


def test_the_driver_spawns_its_workers_before_it_imports_onnx(tmp_path):
    """The workers' start-up (interpreter, imports, sessions) is the longest part of a run's head: the driver
    starts them before its own onnx import (~0.1 s), which ``import attnviz.runtime`` no longer pulls in (its
    public names load on first use and are the defining modules' own)."""
    from planted import corpus_lines, planted_model

    m = planted_model(tmp_path / "m.onnx")
    (tmp_path / "c.txt").write_text("\n".join(corpus_lines(40)))
    code = f"""
import sys
from attnviz.corpus import engines
seen = []
start = engines.WarmPool.start.__func__
def spy(cls, setup, processes, **kw):
    seen.append('onnx' in sys.modules)
    return start(cls, setup, processes, **kw)
engines.WarmPool.start = classmethod(spy)
from attnviz.cli import main
argv = ['corpus', {str(m)!r}, '--texts', {str(tmp_path / "c.txt")!r}, '--out', {str(tmp_path / "out")!r}]
assert main([*argv, '--no-progress', '--workers', '2', '--batch-size', '8']) == 0
assert seen == [False], seen
import attnviz.runtime
from attnviz.runtime import AttentionModel, AttnModel, IOInfo, ModelSet, open_model
from attnviz.runtime import folder, model, protocol
assert (open_model, ModelSet) == (folder.open_model, folder.ModelSet)
assert (AttentionModel, IOInfo, AttnModel) == (model.AttentionModel, model.IOInfo, protocol.AttnModel)
try:
    attnviz.runtime.no_such_name
except AttributeError as e:
    assert 'no_such_name' in str(e)
else:
    raise AssertionError('no AttributeError')
print('ok')
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr
    light = "import sys, attnviz.runtime, attnviz.corpus.run; print('onnx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", light], capture_output=True, text=True, timeout=120, check=False)
    assert out.stdout.strip() == "False", out.stderr


def test_the_command_spawns_its_workers_before_it_imports_numpy(tmp_path):
    """The command line and the corpus command's checks are plain Python: ``attnviz corpus`` spawns its workers
    before the driver imports numpy and the run's modules (~0.1 s CPU that now overlaps the workers' own start-up on
    the other core), and the run then uses those workers (no second spawn)."""
    from planted import corpus_lines, planted_model

    m = planted_model(tmp_path / "m.onnx")
    (tmp_path / "c.txt").write_text("\n".join(corpus_lines(40)))
    code = f"""
import sys
import multiprocessing.popen_spawn_posix as ps
launched = []
launch = ps.Popen._launch
def spy(self, obj):
    launched.append(('numpy' in sys.modules, 'attnviz.corpus.run' in sys.modules))
    return launch(self, obj)
ps.Popen._launch = spy
from attnviz.cli import main
argv = ['corpus', {str(m)!r}, '--texts', {str(tmp_path / "c.txt")!r}, '--out', {str(tmp_path / "out")!r}]
assert main([*argv, '--no-progress', '--workers', '2', '--threads', '1', '--batch-size', '8']) == 0
print(launched)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    # the resource tracker is no spawn Popen: the two workers, both before numpy and the run
    assert out.stdout.strip().splitlines()[-1] == "[(False, False), (False, False)]", out.stdout


def test_python_m_attnviz_corpus_ends_without_the_interpreters_teardown(tmp_path):
    """``python -m attnviz corpus`` ends its process itself once the command returns (cli._leave_at_once): the exit
    handlers run (multiprocessing's: no worker left) and what it printed is flushed, but the modules are not freed
    one by one (pyarrow's, numpy's, ~0.03-0.07 s CPU a command).  A library call of ``main`` returns as before, and
    the results are the same bytes."""
    from planted import corpus_lines, planted_model

    m = planted_model(tmp_path / "m.onnx")
    (tmp_path / "c.txt").write_text("\n".join(corpus_lines(40)))
    code = """
import atexit, builtins, multiprocessing, os, sys
class Teardown:
    def __del__(self):  # freed by the interpreter's teardown (builtins go last)
        os.write(1, b'teardown ran\\n')
builtins._attnviz_test_teardown = Teardown()
atexit.register(lambda: print('exit handlers ran; children:', multiprocessing.active_children()))
from attnviz.cli import main
mode, out, *argv = sys.argv[1:]
sys.exit(main(['corpus', *argv, '--out', out, '--no-progress', '--workers', '2', '--batch-size', '8'], leave=mode == 'leave'))
"""
    runs = {}
    for mode in ("leave", "return"):
        for out, extra in ((tmp_path / mode, []), (tmp_path / f"{mode}_bad", ["--top-k", "0"])):
            argv = [str(m), "--texts", str(tmp_path / "c.txt"), *extra]
            p = subprocess.run(
                [sys.executable, "-c", code, mode, str(out), *argv],
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
            runs[out.name] = p
    for mode in ("leave", "return"):
        ok, bad = runs[mode], runs[f"{mode}_bad"]
        assert ok.returncode == 0 and "wrote " in ok.stdout and "exit handlers ran; children: []" in ok.stdout, ok
        assert bad.returncode == 2 and "--top-k must be 1 or more" in bad.stderr, bad
        assert ("teardown ran" in ok.stdout + bad.stdout) is (mode == "return"), (ok.stdout, bad.stdout)
        assert "leaked" not in ok.stderr  # multiprocessing's semaphores were released by its exit handler
    for f in ("heads.parquet", "examples.parquet"):
        assert (tmp_path / "leave" / f).read_bytes() == (tmp_path / "return" / f).read_bytes()


def test_the_attnviz_console_script_leaves_as_python_m_attnviz_does(tmp_path):
    """The ``attnviz`` script that pip writes calls pyproject's entry point; it is ``main`` as the process's last
    act, so ``attnviz corpus`` skips the interpreter's teardown as ``python -m attnviz corpus`` does."""
    import tomllib

    from planted import corpus_lines, planted_model

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    target = project["scripts"]["attnviz"]
    module, func = target.split(":")
    m = planted_model(tmp_path / "m.onnx")
    (tmp_path / "c.txt").write_text("\n".join(corpus_lines(20)))
    code = f"""
import builtins, os, sys
class Teardown:
    def __del__(self):
        os.write(1, b'teardown ran\\n')
builtins._attnviz_test_teardown = Teardown()
from {module} import {func} as entry
sys.argv = ['attnviz', 'corpus', *sys.argv[1:]]
sys.exit(entry())
"""
    argv = [str(m), "--texts", str(tmp_path / "c.txt"), "--out", str(tmp_path / "o"), "--no-progress", "--workers", "1"]
    p = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=180, check=False)
    assert p.returncode == 0 and "wrote " in p.stdout, p
    assert "teardown ran" not in p.stdout
