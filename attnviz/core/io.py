"""Figure-independent I/O: attention results to and from ``.npz``.

Layout (the CLI contract): ``attn_000``, ``attn_001``, ... each ``[B,H,Tq,Tk]`` float32 in canonical
order; ``sites``: JSON list of site dicts; optional ``tokens``, ``key_tokens`` (str arrays),
``tokens_special``/``key_tokens_special`` (bool), ``tokens_values`` (a time series' values, float),
``patch_grid`` ([rows, cols, offset]), ``image``, ``generated`` (str array), ``info`` (JSON).
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import AttentionResult, DenseMap, MapSource, PatchGrid, SiteInfo, TokenAxis
from attnviz.core.untrusted import open_regular
from attnviz.core.writes import atomic_path


def save_npz(result: AttentionResult, path: str | os.PathLike) -> Path:
    """Write atomically (:func:`attnviz.core.writes.atomic_path`) so a failed write never leaves a half file.

    Maps are produced and written one at a time (the ``np.savez`` layout, streamed): on-demand results never
    hold more than one site's dense maps in memory.
    """
    path = Path(path)
    arrays: dict[str, object] = {}
    for i, m in enumerate(result.maps):
        arrays[f"attn_{i:03d}"] = m.array  # called when its turn to be written comes
    arrays["sites"] = np.array(result.sites_json())
    for name, ax in (("tokens", result.tokens), ("key_tokens", result.key_tokens)):
        if ax is not None:
            arrays[name] = np.array(ax.labels, dtype=str)
            arrays[f"{name}_special"] = np.array(ax.special, dtype=bool)
            if ax.values is not None:
                arrays[f"{name}_values"] = np.array(ax.values, dtype=np.float64)
    if result.patch_grid is not None:
        g = result.patch_grid
        arrays["patch_grid"] = np.array([g.rows, g.cols, g.offset], dtype=np.int64)
    if result.image is not None:
        arrays["image"] = np.asarray(result.image, dtype=np.uint8)
    if result.generated:
        arrays["generated"] = np.array(result.generated, dtype=str)
    arrays["prompt_len"] = np.array(result.prompt_len, dtype=np.int64)
    arrays["info"] = np.array(json.dumps(result.info, default=str))
    with atomic_path(path, "--out") as tmp:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            for name, value in arrays.items():
                a = np.asarray(value() if callable(value) else value)
                if name.startswith("attn_"):
                    a = a.astype(np.float32, copy=False)
                with zf.open(name + ".npy", "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, a, allow_pickle=False)
                del a
    return path


def load_npz(path: str | os.PathLike) -> AttentionResult:
    """Read an ``attnviz extract`` file; anything malformed is one :class:`AttnvizError` line, never a traceback."""
    path = Path(path)
    with open_regular(path, "maps") as f:
        try:
            with np.load(f, allow_pickle=False) as z:
                return _parse(z, path)
        except AttnvizError:
            raise
        except Exception as e:  # zipfile / format / JSON / shape errors in a file from elsewhere
            text = str(e).strip().splitlines()[0][:100] if str(e).strip() else ""
            raise AttnvizError(
                f"{path}: not a valid attnviz .npz file ({type(e).__name__}{': ' + text if text else ''}); "
                "extract one with 'attnviz extract'"
            ) from None


def _parse(z: np.lib.npyio.NpzFile, path: Path) -> AttentionResult:
    if "sites" not in z.files:
        raise AttnvizError(f"{path}: has no 'sites' entry; it was not written by 'attnviz extract'")
    sites = [SiteInfo.from_dict(d) for d in json.loads(str(z["sites"]))]
    maps: list[MapSource] = []
    for i in range(len(sites)):
        a = z[f"attn_{i:03d}"]
        if a.ndim != 4 or a.dtype.kind != "f":
            raise AttnvizError(f"{path}: attn_{i:03d} is {a.dtype}{list(a.shape)}, not a float [B, H, Tq, Tk] map")
        if 0 in a.shape:  # no batch row, head or token: nothing any view can draw or average over
            raise AttnvizError(
                f"{path}: attn_{i:03d} has an empty axis {list(a.shape)} [B, H, Tq, Tk]; "
                "extract it again with at least one token and one head"
            )
        if not np.all(np.isfinite(a)):
            raise AttnvizError(f"{path}: attn_{i:03d} contains NaN or Inf values; these maps cannot be shown")
        maps.append(DenseMap(a))

    def axis(name):
        if name not in z.files:
            return None
        sp = z[f"{name}_special"].tolist() if f"{name}_special" in z.files else None
        vals = z[f"{name}_values"] if f"{name}_values" in z.files else None
        if vals is not None and (vals.dtype.kind not in "fiu" or vals.shape != (len(z[name]),)):
            raise AttnvizError(f"{path}: {name}_values must be one number per {name} label; extract it again")
        return TokenAxis(z[name].tolist(), sp, None if vals is None else vals.astype(float).tolist())

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
