"""A model's own sample input (``attnviz.sample`` metadata), with a relative image path resolved.

The GUI opens a model with it; ``attnviz figure MODEL`` falls back to it when no input is given.
"""

from __future__ import annotations

from pathlib import Path

from attnviz.core import metadata as md

KEYS = ("text", "text_pair", "image", "generate")


def sample_input(meta: dict, model_path: str | Path) -> dict:
    """``{"text"|"text_pair"|"image"|"generate": value}`` from the metadata; {} when there is none."""
    sample = meta.get("sample") or {}
    if not isinstance(sample, dict):
        return {}
    out = {k: sample[k] for k in KEYS if sample.get(k) not in (None, "")}
    img = out.get("image")
    if img and not Path(img).is_absolute():
        mp = Path(model_path)
        # demos keep samples in resources/ beside models/ (checkout) or beside the model (wheel: attnviz/demos)
        for base in (mp.parent, mp.parent.parent, Path.cwd()):
            if (base / img).exists():
                out["image"] = str(base / img)
                break
    return out


def sample_for_path(model_path: str | Path) -> dict:
    """:func:`sample_input` read from an ONNX file's metadata without loading its weights."""
    import onnx

    try:
        m = onnx.load(str(model_path), load_external_data=False)
    except Exception:
        return {}
    return sample_input(md.parse({p.key: p.value for p in m.metadata_props}), model_path)
