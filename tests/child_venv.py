"""A helper virtual environment that sees the packages of the interpreter running the tests.

``venv --system-site-packages`` inherits the *base* interpreter's packages.  When the tests themselves run in a
venv (the README's test command in a fresh ``python -m venv``), torch, onnx and the rest live in that venv, not
in the base, so a helper venv built that way misses them ("No module named 'torch'").  :func:`create` therefore
also writes a ``.pth`` file into the helper's site-packages listing the running interpreter's site-packages
directories.  ``site`` appends ``.pth`` entries after the helper's own site-packages, so what the helper installs
itself (optimum's older transformers, an installed wheel) still wins over the parent's copies.
"""

from __future__ import annotations

import site
import sys
import sysconfig
import venv
from pathlib import Path

PTH = "_attnviz_parent_site.pth"


def parent_site_dirs() -> list[str]:
    """The running interpreter's site-packages directories (a venv's own, then the base's, then the user's)."""
    dirs = [*site.getsitepackages(), sysconfig.get_path("purelib"), sysconfig.get_path("platlib")]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    seen: list[str] = []
    for d in dirs:
        if d and Path(d).is_dir() and d not in seen:
            seen.append(d)
    return seen


def site_packages(d: Path) -> Path:
    """The site-packages directory of the venv at ``d`` (the ``venv`` install scheme, so any platform)."""
    return Path(sysconfig.get_path("purelib", scheme="venv", vars={"base": str(d), "platbase": str(d)}))


def create(d: Path, *, with_pip: bool = True, clear: bool = True) -> Path:
    """Create a venv at ``d`` that sees the running interpreter's packages; returns its python."""
    venv.EnvBuilder(system_site_packages=True, clear=clear, with_pip=with_pip).create(d)
    sp = site_packages(d)
    sp.mkdir(parents=True, exist_ok=True)
    (sp / PTH).write_text("".join(f"{p}\n" for p in parent_site_dirs()))
    return (
        d / ("Scripts" if sys.platform == "win32" else "bin") / ("python.exe" if sys.platform == "win32" else "python")
    )
