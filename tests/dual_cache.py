"""hf_models.export_dual made once per machine (tests/build_cache.py), as hf_models.export is: keyed on the sources
of hf_models (the towers, their inputs, the export call) and of the package's exporter.  Its own module, so that
hf_models' source, which keys every other cached export, stays as it is."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import build_cache
import hf_models


def export_dual(arch: str, part: str, folder: Path) -> Path:
    """A copy in ``folder`` of ``hf_models.export_dual(arch, part, ...)`` (``folder/ARCH_PART.onnx``)."""
    name = f"{arch}_{part}"
    exporter = sys.modules[hf_models.onnx_export.__module__]
    key = [name, *build_cache.sources(sys.modules[__name__], hf_models, exporter)]
    cached = build_cache.cached_folder(f"hf-dual-{name}", key, lambda into: hf_models.export_dual(arch, part, into))
    for f in cached.iterdir():  # the .onnx file (and any external-data file beside it)
        shutil.copy2(f, Path(folder) / f.name)
    return Path(folder) / f"{name}.onnx"
