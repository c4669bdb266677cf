"""Where a model's sidecar files may be read from: the one guard for reading beside a model.

Sidecars are the files that travel with a model: ``tokenizer.json``, ``tokenizer_config.json``, ``config.json``,
``generation_config.json``, ``preprocessor_config.json``.  They are read from the model's own folder only, so a
file planted next to that folder never changes a result.  The one sanctioned step up is the Hugging Face Hub
layout, ``REPO/onnx/model.onnx`` with the tokenizer and config files in ``REPO/``: a model in a folder named
exactly ``onnx`` also reads them from the folder above (its own folder first).  A sidecar that is a link is read
only where :mod:`attnviz.core.links` allows (inside those folders, or a Hugging Face cache snapshot's own blobs);
any other link is refused in one line before its target is read.  The readers of what a folder's
config files say (special token ids, image preprocessing) live here too: every model kind reads them the same way.
"""

from __future__ import annotations

from pathlib import Path

from attnviz import AttnvizError
from attnviz.core.links import readable_beside
from attnviz.core.metadata import is_token_id
from attnviz.core.untrusted import read_json

HUB_ONNX_FOLDER = "onnx"  # the Hub keeps ONNX exports in REPO/onnx/, beside nothing else of the repo's


def sidecar_dirs(model_file: str | Path) -> list[Path]:
    """The folders a model file's sidecars are read from, nearest first."""
    folder = Path(model_file).parent
    return [folder, folder.parent] if folder.name == HUB_ONNX_FOLDER else [folder]


def beside(model_file: str | Path, path: str | Path) -> Path:
    """``path``, a file found beside a model file, if the link policy (:mod:`attnviz.core.links`) lets it be
    read: its real location lies inside the model's folders (:func:`sidecar_dirs`, the Hub repo above ``onnx/``
    included) or in the Hugging Face cache repository's blobs; else one :class:`~attnviz.AttnvizError`."""
    return readable_beside(path, sidecar_dirs(model_file)[-1])


def sidecar(model_file: str | Path, name: str) -> Path | None:
    """The sidecar ``name`` of a model file (the nearest of :func:`sidecar_dirs` that has it), or None.  Whatever
    is there is returned, a FIFO or a folder too: the reader's own guard refuses it in one line (a tokenizer) or
    passes over it (a config file), so nothing blocks and nothing nearer is skipped for a file further up.  A
    link out of the folder is refused here (:func:`beside`), for every reader alike, before anything reads it."""
    found = next((d / name for d in sidecar_dirs(model_file) if (d / name).exists()), None)
    return None if found is None else beside(model_file, found)


def sidecar_stamps(model_file: str | Path, name: str) -> tuple[int, ...]:
    """When the sidecar ``name`` last changed in each of :func:`sidecar_dirs` (0: not there): a stat, never a read
    nor the link check :func:`sidecar` makes, so a cache of what :func:`sidecar_json` read can be keyed on it."""

    def stamp(path: Path) -> int:
        try:
            return path.stat().st_mtime_ns
        except OSError:
            return 0

    return tuple(stamp(d / name) for d in sidecar_dirs(model_file))


def sidecar_json(model_file: str | Path, name: str) -> dict:
    """A JSON sidecar of a model file as a dict ({} when absent, unreadable or not an object); read only where
    :func:`sidecar` allows."""
    p = sidecar(model_file, name)
    try:
        d = read_json(p, p.name) if p is not None and p.is_file() else {}
    except AttnvizError:  # read through the regular-file guard: a FIFO is never waited on
        return {}
    return d if isinstance(d, dict) else {}


# config.json keys -> attnviz special-token roles (metadata "special")
CONFIG_SPECIAL = {
    "decoder_start_token_id": "decoder_start",
    "eos_token_id": "eos",
    "bos_token_id": "bos",
    "pad_token_id": "pad",
}


def config_special(model_file: Path) -> dict:
    """Special token ids from config.json, then generation_config.json (which wins, as in transformers)."""
    out: dict = {}
    for name in ("config.json", "generation_config.json"):
        cfg = sidecar_json(model_file, name)  # valid JSON that is no object (a list) is passed over as unreadable
        for key, role in CONFIG_SPECIAL.items():
            v = cfg.get(key)
            if isinstance(v, list):
                v = v[0] if v else None
            if is_token_id(v):  # a config file's bad id is passed over, as the unreadable file would be
                out[role] = v
    return out


def folder_image(model_file: Path) -> dict:
    """The folder's image preprocessing as attnviz ``image`` metadata: size, mean and std from
    ``preprocessor_config.json`` (what transformers' image processor applies), else the size from config.json."""
    pre = sidecar_json(model_file, "preprocessor_config.json")
    out: dict = {}
    size = pre.get("size")
    if isinstance(size, dict) and isinstance(size.get("height"), int) and isinstance(size.get("width"), int):
        out["size"] = [size["height"], size["width"]]
    elif isinstance(size, int):
        out["size"] = [size, size]
    if (
        pre.get("do_normalize", True)
        and isinstance(pre.get("image_mean"), list)
        and isinstance(pre.get("image_std"), list)
    ):
        out["mean"], out["std"] = pre["image_mean"], pre["image_std"]
    if "size" not in out:  # VisionEncoderDecoder configs keep the encoder's under "encoder"
        cfg = sidecar_json(model_file, "config.json")
        enc = cfg.get("encoder")
        enc = enc if isinstance(enc, dict) else cfg
        if isinstance(enc.get("image_size"), int):
            out["size"] = [enc["image_size"], enc["image_size"]]
    return out
