"""The one atomic-write helper, and the rule that an output never replaces an input.

Every file attnviz writes (maps, figures, recipes, exports, checkpoints, ONNX files) goes through
:func:`atomic_path`: a temp file in the destination folder (same file system, so the rename is atomic),
published with the permissions a plain ``open()`` would give, removed on any failure — so a failed or
interrupted write never leaves a half file and never touches the existing one.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from attnviz import AttnvizError


def _mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _folder(path: Path, flag: str) -> Path:
    if path.is_dir():
        raise AttnvizError(f"cannot write {path}: it is a folder; give a file name{_hint(flag)}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise AttnvizError(
            f"cannot write {path}: folder {parent} does not exist; create it or choose another{_hint(flag, ' ')}"
        )
    return parent


def _hint(flag: str, sep: str = " with ") -> str:
    return f"{sep}{flag}" if flag else (" path" if sep == " " else "")


@contextmanager
def atomic_path(path: str | os.PathLike, flag: str = "") -> Iterator[Path]:
    """Yield a temp file path beside ``path``; on normal exit it replaces ``path`` in one step.

    ``flag`` names the option that chose ``path`` (for messages), e.g. ``"--out"``.
    """
    path = Path(path)
    parent = _folder(path, flag)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    except OSError as e:
        raise AttnvizError(f"cannot write {path}: {e.strerror}; choose a writable {flag or 'folder'}") from None
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, _mode())  # mkstemp makes 0600; published files get the usual permissions
        os.replace(tmp, path)
    except OSError as e:
        raise AttnvizError(
            f"cannot write {path}: {e.strerror or e}; check the folder is writable and has space"
        ) from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def publish_folder(staging: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Move a fully written ``staging`` folder to ``target`` (absent or empty) in one rename, on the same filesystem."""
    target = Path(target)
    if target.exists():
        target.rmdir()  # refuses a non-empty folder: callers check before they stage
    os.replace(staging, target)
    return target


def atomic_write_bytes(path: str | os.PathLike, data: bytes, flag: str = "", sync: bool = False) -> Path:
    with atomic_path(path, flag) as tmp, open(tmp, "wb") as f:
        f.write(data)
        if sync:  # checkpoints: on disk before the rename publishes them
            f.flush()
            os.fsync(f.fileno())
    return Path(path)


def atomic_write_json(path: str | os.PathLike, obj: Any, flag: str = "", sync: bool = False, **dumps: Any) -> Path:
    dumps = dumps or {"indent": 2}
    return atomic_write_bytes(path, (json.dumps(obj, **dumps) + "\n").encode("utf-8"), flag, sync)


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """True when ``a`` and ``b`` name the same file (links and ``..`` included)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(a).resolve() == Path(b).resolve()


def refuse_input_as_output(out: str | os.PathLike, inputs: dict[str, str | os.PathLike | None], flag: str) -> None:
    """Refuse writing ``out`` when it is one of the ``inputs`` (``{"the model": path, ...}``)."""
    for what, p in inputs.items():
        if p and same_file(out, p):
            raise AttnvizError(
                f"{flag} {out} is {what} this command reads; writing it would destroy it — choose another {flag}"
            )
