"""That ``--provider auto`` found CUDA unusable here, kept so that the next command does not ask again.

A GPU build of onnxruntime (onnxruntime-gpu) on a machine with an NVIDIA GPU but without the CUDA / cuDNN
libraries it needs: every ``auto`` session asked for CUDA first (runtime/session.py: ``preload_dlls``, then a
session with the CUDA provider, which onnxruntime makes on the CPU after its loader fails), in every command and
every corpus worker, and each time landed on the CPU.  Once such a session lands on the CPU, that is kept in the
cache folder (runtime/optcache.py, kind ``cuda``) under what decides it: onnxruntime's installation
(:func:`attnviz.runtime.ort_build.installed`: its files, build description and shared libraries, so its version
too), the NVIDIA driver (``/proc/driver/nvidia/version``) and where the libraries are looked for (the library path
variables, the dynamic loader's cache ``/etc/ld.so.cache``, which ldconfig rewrites as a package installs a
library, and the ``nvidia-*`` wheels ``preload_dlls`` loads from).  Any of them changing (CUDA installed, another
driver, another environment, onnxruntime upgraded) names another entry, and the next ``auto`` session asks CUDA
again; so does one a day later (:data:`MAX_AGE_S`: a library copied where nothing above sees it), and a ``cuda``
session that runs on CUDA forgets the record.  Only the negative is kept: a session that ran on CUDA is no promise
for the next one (runtime/light_model.landed keeps where ``auto`` landed per model, for the corpus workers).
"""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

from attnviz.runtime import optcache

KIND = "cuda"
# which GPUs CUDA sees, and where onnxruntime's CUDA provider and the loader look for libcudart / libcudnn (PATH:
# Windows' DLL search)
LIBRARY_ENV = (
    "CUDA_VISIBLE_DEVICES",  # (an empty one hides every GPU: the next command without it asks again)
    "LD_LIBRARY_PATH",
    "CUDA_PATH",
    "CUDA_HOME",
    "CUDNN_PATH",
    "CONDA_PREFIX",
    *(("PATH",) if os.name == "nt" else ()),
)
DRIVER_FILES = ("/proc/driver/nvidia/version", "/sys/module/nvidia/version")
LOADER_CACHE = "/etc/ld.so.cache"
MAX_AGE_S = 24 * 3600  # a record older than this is not believed: the next ``auto`` session asks again


def unusable() -> bool:
    """Whether an earlier ``auto`` session with this onnxruntime, driver and library path landed on the CPU (less
    than :data:`MAX_AGE_S` ago)."""
    key = _key(made=True)
    kept = optcache.kept_json(KIND, key) if key is not None else None
    if not isinstance(kept, dict) or kept.get("cuda") != "unusable" or not isinstance(kept.get("at"), int | float):
        return False
    return 0 <= _now() - kept["at"] < MAX_AGE_S


def keep_unusable() -> None:
    """An ``auto`` session asked for CUDA and landed on the CPU: the next ones here need not ask (:func:`unusable`)."""
    key = _key(made=False)
    if key is not None:
        optcache.keep_json(KIND, key, {"cuda": "unusable", "at": _now()})


def forget() -> None:
    """A session ran on CUDA: a record that says it cannot is forgotten (written only where there is one)."""
    if unusable():
        key = _key(made=True)
        if key is not None:
            optcache.keep_json(KIND, key, {"cuda": "usable"})


def _now() -> float:
    return time.time()


def described() -> list | None:
    """What decides whether CUDA loads here (the module docstring); None where onnxruntime's installation cannot
    be named (nothing is then kept or believed)."""
    from attnviz.runtime import ort_build

    build = ort_build.installed()
    if build is None:
        return None
    return [build, _driver(), {v: os.environ.get(v) for v in LIBRARY_ENV}, _loader_cache(), _wheels()]


def _key(made: bool) -> optcache.GraphKey | None:
    # a lookup does not make the cache folder (opening a model must not create it: optcache._made_folder)
    root = optcache._made_folder() if made else optcache.folder()
    what = described() if root is not None else None
    return None if root is None or what is None else optcache.fact_key(root, ["cuda unusable", what])


def _driver() -> str | None:
    """The NVIDIA kernel driver's own version line (its first file that reads), None where none does."""
    for f in DRIVER_FILES:
        try:
            return Path(f).read_text("utf-8", "replace").strip()[:500]
        except OSError:
            continue
    return None


def _loader_cache() -> list | None:
    """The dynamic loader's cache file by size and modification time (ldconfig rewrites it as libraries come)."""
    try:
        st = os.stat(LOADER_CACHE)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _wheels() -> list:
    """The ``nvidia`` namespace package's folders (the nvidia-cudnn-cu12... wheels), each with what it holds and its
    modification time: a wheel installed or removed changes them."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    out = []
    for d in sorted(spec.submodule_search_locations or ()) if spec is not None else ():
        try:
            out.append([d, os.stat(d).st_mtime_ns, sorted(os.listdir(d))])
        except OSError:
            continue
    return out
