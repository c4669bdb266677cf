"""What a checkpoint was made under, in the user's words, so that a run refused its resume says which setting differs.

A checkpoint's identity is a fingerprint (a hash: corpus/run.py), which says *that* a run differs, not how: "belongs
to another run (model, data, batch size or top-k differ)" sent a user who had changed --max-tokens, and none of
those, looking.  Beside the fingerprint a checkpoint keeps its settings by name (flag -> value; the model and the
data by their sha256); a refused resume compares them with the new run's.  Checkpoints written before keep none.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from attnviz.core.untrusted import open_regular, parse_json

KEY = "settings"  # the checkpoint .npz entry: a JSON object


def saved(settings: dict[str, Any] | None) -> dict[str, Any]:
    """The entry to add to a checkpoint's arrays (none when the run names no settings)."""
    return {} if settings is None else {KEY: np.array(json.dumps(settings))}


def kept(path: Path) -> dict[str, Any] | None:
    """The settings a checkpoint was written under, or None (an older checkpoint, or none readable)."""
    if not os.path.lexists(path):
        return None
    try:
        with open_regular(path, "checkpoint") as f, np.load(f) as z:
            if KEY not in z.files:
                return None
            got = parse_json(str(z[KEY]), f"{path} settings")
    except Exception:  # unreadable: the load that comes first names that
        return None
    return got if isinstance(got, dict) else None


def _is_sha(v: Any) -> bool:
    return isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v)


def _shown(v: Any) -> str:
    return "none" if v is None else str(v)[:60]


def difference(path: Path, now: dict[str, Any] | None, fallback: str) -> str:
    """Why the checkpoint at ``path`` belongs to another run: its settings that differ from ``now``, by name
    ("--max-tokens none there, 10 here"; the model or the data "changed"), else ``fallback``."""
    before = kept(path)
    if before is None or now is None:
        return fallback
    diffs = []
    for name in [*now, *(k for k in before if k not in now)]:
        a, b = before.get(name), now.get(name)
        if a == b:
            continue
        if _is_sha(a) and _is_sha(b):  # a model's or the data's sha256: that it changed is what a user can act on
            diffs.append(f"{name} changed")
        else:
            diffs.append(f"{name} {_shown(a)} there, {_shown(b)} here")
    return "; ".join(diffs) if diffs else fallback
