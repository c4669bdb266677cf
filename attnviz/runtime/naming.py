"""What a model is called in titles, the sidebar and figure names.

``export-hf`` and optimum both write ``model.onnx``, so a file's stem would title every bring-your-own model
"model".  The name is, in order: the metadata's ``attnviz.name`` (export-hf writes its source's), else for a
``model.onnx`` its folder's name or, when that is generic (``onnx``, ``model``), the folder's ``config.json``
(:func:`attnviz.core.metadata.source_name`), else the file's stem.
"""

from __future__ import annotations

from pathlib import Path

from attnviz import AttnvizError
from attnviz.core import metadata as md
from attnviz.core.untrusted import read_json
from attnviz.runtime.sidecar import sidecar

CONFIG_MAX_BYTES = 1 << 20  # a Hugging Face config.json is a few kB; a bigger file is not read for a name


def _config(model_file: Path) -> dict:
    p = sidecar(model_file, "config.json")  # the model's folder (a Hub repo's above onnx/), never above
    try:
        d = read_json(p, "config.json", limit=CONFIG_MAX_BYTES) if p is not None and p.is_file() else {}
    except AttnvizError:  # a config file that cannot be read names nothing; the model still opens
        return {}
    return d if isinstance(d, dict) else {}


NAME_MAX_CHARS = 120  # a title's worth; the metadata comes from whoever wrote the file


def model_name(path: Path, meta: dict) -> str:
    given = meta.get("name")
    if isinstance(given, str) and given.strip():
        return " ".join(given.split())[:NAME_MAX_CHARS]  # one line, whatever the file says
    if path.stem.lower() == "model":
        found = md.source_name(path.parent.resolve().name, _config(path))
        if found:
            return found
    return path.stem
