"""Figure-independent I/O: attention results to and from ``.npz``.

Layout (the CLI contract): ``attn_000``, ``attn_001``, ... each ``[B,H,Tq,Tk]`` float32 in canonical
order; ``sites``: JSON list of site dicts; optional ``tokens``, ``key_tokens`` (str arrays),
``tokens_special``/``key_tokens_special`` (bool), ``patch_grid`` ([rows, cols, offset]), ``image``,
``generated`` (str array), ``info`` (JSON).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import AttentionResult, DenseMap, PatchGrid, SiteInfo, TokenAxis


def save_npz(result: AttentionResult, path: str | os.PathLike) -> Path:
    """Write atomically (temp file + rename) so a failed write never leaves a half file."""
    path = Path(path)
    arrays: dict[str, np.ndarray] = {}
    for i, m in enumerate(result.maps):
        arrays[f"attn_{i:03d}"] = np.asarray(m.array(), dtype=np.float32)
    arrays["sites"] = np.array(result.sites_json())
    for name, ax in (("tokens", result.tokens), ("key_tokens", result.key_tokens)):
        if ax is not None:
            arrays[name] = np.array(ax.labels, dtype=str)
            arrays[f"{name}_special"] = np.array(ax.special, dtype=bool)
    if result.patch_grid is not None:
        g = result.patch_grid
        arrays["patch_grid"] = np.array([g.rows, g.cols, g.offset], dtype=np.int64)
    if result.image is not None:
        arrays["image"] = np.asarray(result.image, dtype=np.uint8)
    if result.generated:
        arrays["generated"] = np.array(result.generated, dtype=str)
    arrays["prompt_len"] = np.array(result.prompt_len, dtype=np.int64)
    arrays["info"] = np.array(json.dumps(result.info, default=str))
    return atomic_write(path, lambda f: np.savez(f, **arrays), suffix=".npz")


def atomic_write(path: str | os.PathLike, write, suffix: str = ".tmp") -> Path:
    """Write ``path`` through ``write(binary_file)`` into a temp file beside it, then rename: a failed write
    never leaves a half file or touches an existing one.  Errors are one AttnvizError line."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise AttnvizError(f"cannot write {path}: folder {parent} does not exist; create it or choose another output file", param="output")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".attnviz-", suffix=suffix, dir=parent)
    except OSError as e:
        raise AttnvizError(f"cannot write {path}: {e.strerror}; choose a writable output file", param="output") from None
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the permissions a plain open() would
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise AttnvizError(f"cannot write {path}: {e.strerror}; choose a writable output file", param="output") from None
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """UTF-8 text through :func:`atomic_write`."""
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")), suffix=".txt")


def load_npz(path: str | os.PathLike) -> AttentionResult:
    path = Path(path)
    try:
        z = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise AttnvizError(f"{path}: no such file") from None
    except Exception as e:  # zipfile / format errors
        raise AttnvizError(f"{path}: not an attnviz .npz file ({type(e).__name__}); extract one with 'attnviz extract'") from None
    with z:
        if "sites" not in z.files:
            raise AttnvizError(f"{path}: has no 'sites' entry; it was not written by 'attnviz extract'")
        sites = [SiteInfo.from_dict(d) for d in json.loads(str(z["sites"]))]
        maps = [DenseMap(z[f"attn_{i:03d}"]) for i in range(len(sites))]

        def axis(name):
            if name not in z.files:
                return None
            sp = z[f"{name}_special"].tolist() if f"{name}_special" in z.files else None
            return TokenAxis(z[name].tolist(), sp)

        grid = PatchGrid(*[int(v) for v in z["patch_grid"]]) if "patch_grid" in z.files else None
        return AttentionResult(
            maps=maps,
            sites=sites,
            tokens=axis("tokens"),
            key_tokens=axis("key_tokens"),
            patch_grid=grid,
            image=z["image"] if "image" in z.files else None,
            generated=z["generated"].tolist() if "generated" in z.files else [],
            prompt_len=int(z["prompt_len"]) if "prompt_len" in z.files else 0,
            info=json.loads(str(z["info"])) if "info" in z.files else {},
        )
