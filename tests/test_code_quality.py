"""The code-quality gates a contributor runs before a commit (see .pre-commit-config.yaml), as tests:
``ruff check`` and ``ruff format --check`` over the whole tree, ``mypy`` over the package, with the
settings in pyproject.toml."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from optimum_env import CACHE

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
    # incremental, with a cache kept per machine (not in the checkout): a fresh clone (CI) reuses the analysis of
    # every module whose source hash is unchanged (~6 s instead of ~30 s of CPU); mypy checks each hash itself
    out = _run(sys.executable, "-m", "mypy", "--cache-dir", str(CACHE / "mypy"))
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


# JSON from users goes through attnviz.core.untrusted.parse_json / read_json (depth, number length, size, UTF-8:
# one line, never RecursionError).  The only other json.loads, each reviewed:
JSON_LOADS_ALLOWED = {
    "attnviz/core/untrusted.py",  # the guard itself
    "attnviz/figures/recipe.py",  # json.loads(json.dumps(recipe)): a deep copy of a dict this process built
}


def json_loads_calls(source: str) -> list[int]:
    """Lines calling json.load/json.loads (or the names imported from json), and the JSONDecoder."""
    import ast

    tree = ast.parse(source)
    aliases = {
        a.asname or a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module == "json"
        for a in n.names
        if a.name in ("load", "loads", "JSONDecoder")
    }
    mods = {
        a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names if a.name == "json"
    }
    hits = []
    for n in ast.walk(tree):
        f = n.func if isinstance(n, ast.Call) else None
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in mods:
            if f.attr in ("load", "loads", "JSONDecoder"):
                hits.append(n.lineno)
        elif isinstance(f, ast.Name) and f.id in aliases:
            hits.append(n.lineno)
    return hits


def test_json_is_parsed_only_through_the_guard():
    found = {
        f"{p.relative_to(ROOT).as_posix()}:{line}"
        for p in sorted((ROOT / "attnviz").rglob("*.py"))
        if p.relative_to(ROOT).as_posix() not in JSON_LOADS_ALLOWED
        for line in json_loads_calls(p.read_text(encoding="utf-8"))
    }
    assert not found, f"parse user JSON with attnviz.core.untrusted.parse_json/read_json, not json.loads: {found}"


def test_the_json_check_can_fail():
    assert json_loads_calls("import json\nx = json.loads(s)\n") == [2]
    assert json_loads_calls("import json as j\nwith open(p) as f:\n    x = j.load(f)\n") == [3]
    assert json_loads_calls("from json import loads as L\nx = L(s)\n") == [2]
    assert json_loads_calls("import json\nx = json.dumps(s)\n") == []
