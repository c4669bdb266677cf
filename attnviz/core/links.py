"""Which files beside a model may be read: the one link policy for sidecars, external data and export-hf's folder.

A file found in a model's folder is read when its real location (links followed) lies inside that folder, or,
for a folder inside a Hugging Face cache snapshot (``REPO/snapshots/REV[/SUB]``, ``REPO`` named
``models--ORG--NAME``), under ``REPO/blobs/``: the cache keeps every snapshot file's bytes there behind a relative
link (``tokenizer.json -> ../../blobs/SHA``), and optimum exports copied from the cache keep such links.  Any other
link out of the folder (``tokenizer.json -> /etc/passwd``, ``-> ../../secret``) is refused before a byte of its
target is read, in one line naming the file, where it points and the fix.  The model file the user named may be
a link anywhere: the user chose it; the policy is about what attnviz reads next to it on its own.
"""

from __future__ import annotations

import os
from pathlib import Path

from attnviz import AttnvizError

HUB_REPO_PREFIX = "models--"  # huggingface_hub's cache names a model repository models--ORG--NAME
HUB_SNAPSHOTS = "snapshots"  # REPO/snapshots/REV/...: the files as the revision lays them out (links)
HUB_BLOBS = "blobs"  # REPO/blobs/SHA: the bytes those links point to


def hub_blobs(folder: str | os.PathLike) -> Path | None:
    """``REPO/blobs`` where the resolved ``folder`` lies in a Hugging Face cache snapshot
    (``REPO/snapshots/REV[/SUB...]``), else None.  ``blobs`` is joined, never resolved: a ``blobs`` that is
    itself a link out of the repository holds nothing a target may resolve under."""
    parts = Path(folder).resolve().parts
    for i in range(len(parts) - 2, 0, -1):  # the nearest snapshots/ with a revision folder below it
        if parts[i] == HUB_SNAPSHOTS and parts[i - 1].startswith(HUB_REPO_PREFIX):
            return Path(*parts[:i], HUB_BLOBS)
    return None


def _target(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a link loop (RuntimeError before Python 3.13)
        raise AttnvizError(f"{path}: a link that loops; copy the file itself into the model's folder") from None


def may_read(path: str | os.PathLike, folder: str | os.PathLike) -> bool:
    """Whether :func:`readable_beside` lets ``path`` be read (for walks over a folder that pass over what it
    refuses rather than stop)."""
    try:
        readable_beside(path, folder)
    except AttnvizError:
        return False
    return True


def readable_beside(path: str | os.PathLike, folder: str | os.PathLike) -> Path:
    """``path`` (a file found in the model's ``folder``) if the policy above lets attnviz read it, else one
    :class:`~attnviz.AttnvizError`.  Only paths are looked at: nothing is opened."""
    p, base = Path(path), Path(folder).resolve()
    target = _target(p)
    if target == base or base in target.parents:
        return p
    blobs = hub_blobs(base)
    if blobs is not None and blobs in target.parents:
        return p
    raise AttnvizError(
        f"{p}: a link to {target}, outside the model's folder {base}; copy the file itself into the folder"
    )


def hub_linked(model_file: str | os.PathLike) -> bool:
    """Whether ``model_file`` is a Hugging Face cache snapshot's link into its repository's blobs (its external
    data files then lie in the blobs under their hashes, where no location in the graph names them)."""
    blobs = hub_blobs(Path(model_file).absolute().parent)
    return blobs is not None and blobs in _target(Path(model_file)).parents
