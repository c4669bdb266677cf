"""onnxruntime's installation named without importing it: which build a kept record was made with.

``pip install onnxruntime`` and ``onnxruntime-gpu`` both install the package ``onnxruntime``, of the same version
where both are current: a record that says where ``--provider auto`` landed (runtime/light_model.py: on CUDA) must
not be believed after a CPU-only build replaced the GPU one.  What tells them apart is in ``capi/``: the build's
own description (``build_and_package_info.py``: the package's name, its version and, for a GPU build, its CUDA
version) and the shared libraries the build ships (a GPU build adds ``onnxruntime_providers_cuda``).  An upgrade or
a reinstall rewrites them (size, modification time); the description is read by its bytes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

CUDA_LIBRARY = "onnxruntime_providers_cuda"  # (lib…so on Linux, ….dll on Windows): only a GPU build has it
DESCRIPTION = "build_and_package_info.py"
_LIBRARY_SUFFIXES = (".so", ".dll", ".dylib")


def installed() -> list | None:
    """The onnxruntime this process would import, as :func:`described` names it; None where it cannot be named
    (not installed, unreadable): nothing is then kept or believed."""
    try:
        spec = importlib.util.find_spec("onnxruntime")
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    return described(Path(origin).parent) if origin is not None else None


def described(package: Path) -> list | None:
    """The installation at ``package`` (onnxruntime's folder): its ``__init__.py``'s path, size and modification
    time, the sha256 of ``capi/build_and_package_info.py`` (None where the build has none) and every shared
    library in ``capi/`` by name, size and modification time, sorted by name."""
    try:
        init = os.stat(package / "__init__.py")
        capi = package / "capi"
        try:
            info: str | None = hashlib.sha256((capi / DESCRIPTION).read_bytes()).hexdigest()
        except FileNotFoundError:
            info = None
        libraries = []
        with os.scandir(capi) as it:
            for e in it:
                if _library(e.name):
                    st = e.stat()
                    libraries.append([e.name, st.st_size, st.st_mtime_ns])
    except OSError:
        return None
    return [str(package / "__init__.py"), init.st_size, init.st_mtime_ns, info, sorted(libraries)]


def has_cuda(build: list) -> bool:
    """Whether the build :func:`described` names ships the CUDA provider (without it ``auto`` lands on the CPU
    whatever the machine has)."""
    return any(CUDA_LIBRARY in name for name, _, _ in build[4])


def _library(name: str) -> bool:
    return any(name.endswith(s) or f"{s}." in name for s in _LIBRARY_SUFFIXES)
