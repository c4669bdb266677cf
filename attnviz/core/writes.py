"""The one output guard: an output never replaces an input, and every write is atomic.

Every command that writes first calls :func:`guard` with what it reads and what it will write: an output that
is one of the inputs (the same path, a symlink to it, a hard link to it, or a file directly inside an input
folder) is refused in one line before anything is written.  The inputs stay declared for the rest of the
command (:func:`command_scope`), so every later write — outputs whose names are only known mid-run included —
is checked again by :func:`atomic_path` as it lands.

Every file attnviz writes (maps, figures, recipes, exports, checkpoints, ONNX files, corpus results) goes through
:func:`atomic_path`: a temp file in the destination folder (same file system, so the rename is atomic),
published with the permissions a plain ``open()`` would give, removed on any failure — so a failed or
interrupted write never leaves a half file and never touches the existing one.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
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
    try:
        st = os.stat(path)  # (a link followed: /dev/stdout is a link to the process's fd)
    except OSError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        # the atomic rename replaces the path itself: run as root, --out /dev/null turned /dev/null into a
        # regular file for every program on the machine (and /dev/stdout's link into a file)
        raise AttnvizError(
            f"cannot write {path}: it is a device, pipe or socket, not a file, and writing would replace it; give a "
            f"file name{_hint(flag)}"
        )
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise AttnvizError(
            f"cannot write {path}: folder {parent} does not exist; create it or choose another{_hint(flag, ' ')}"
        )
    return parent


def check_destination(path: str | os.PathLike, flag: str = "") -> None:
    """Refuse, before the work, an output :func:`atomic_path` would refuse when it lands (a folder, a device or
    pipe, a missing folder): a command writing several files checks them all first, so that none is written
    where another one cannot be."""
    _folder(Path(path), flag)


def _hint(flag: str, sep: str = " with ") -> str:
    return f"{sep}{flag}" if flag else (" path" if sep == " " else "")


@contextmanager
def atomic_path(path: str | os.PathLike, flag: str = "") -> Iterator[Path]:
    """Yield a temp file path beside ``path``; on normal exit it replaces ``path`` in one step.

    ``flag`` names the option that chose ``path`` (for messages), e.g. ``"--out"``.
    """
    with atomic_paths([(path, flag)]) as (tmp,):
        yield tmp


@contextmanager
def atomic_paths(targets: Sequence[tuple[str | os.PathLike, str]]) -> Iterator[list[Path]]:
    """Yield a temp file path beside each of ``targets`` (``(path, flag)``); on normal exit they replace their
    paths, together.  The outputs of one command that belong together (``align``'s links and translations, a
    figure and its recipe) were written one after the other: a Ctrl-C or a failed write between them left a new
    translations file beside the old links.  Here every file is written in full first (any failure until then
    leaves every old file as it was), then the renames run one after another with a Ctrl-C held back over them
    (:func:`attnviz.core.interrupts.held`: microseconds), so an interrupt leaves all the old files or all the new."""
    from attnviz.core.interrupts import held

    made: list[tuple[Path, str]] = []  # (target, temp file)
    try:
        for path, flag in targets:
            path = Path(path)
            parent = _folder(path, flag)
            _refuse(path, flag or "output", _DECLARED.get())
            try:
                fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
            except OSError as e:
                raise AttnvizError(f"cannot write {path}: {e.strerror}; choose a writable {flag or 'folder'}") from None
            os.close(fd)
            made.append((path, tmp))
        writing = " and ".join(str(p) for p, _ in made)
        try:
            yield [Path(tmp) for _, tmp in made]
            for _, tmp in made:
                os.chmod(tmp, _mode())  # mkstemp makes 0600; published files get the usual permissions
            with held():
                for path, tmp in made:
                    writing = str(path)
                    os.replace(tmp, path)
        except OSError as e:
            raise AttnvizError(
                f"cannot write {writing}: {e.strerror or e}; check the folder is writable and has space"
            ) from None
    finally:
        for _, tmp in made:
            if os.path.lexists(tmp):
                os.unlink(tmp)


def atomic_write_files(files: Sequence[tuple[str | os.PathLike, bytes, str]]) -> list[Path]:
    """Several outputs that belong together, ``(path, data, flag)`` each, written as one (:func:`atomic_paths`)."""
    with atomic_paths([(path, flag) for path, _, flag in files]) as tmps:
        for tmp, (_, data, _) in zip(tmps, files):
            with open(tmp, "wb") as f:
                f.write(data)
    return [Path(path) for path, _, _ in files]


def make_folder(path: str | os.PathLike, flag: str = "--out") -> Path:
    """The one way an output folder is made (parents too; an existing one is fine): a read-only disk, a missing
    permission or a file in the way is one line naming the folder and ``flag``, never an OSError."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise AttnvizError(f"cannot create folder {path}: {e.strerror or e}; choose a writable {flag}") from None
    return path


def _missing_levels(path: Path) -> list[Path]:
    """``path`` and its parents that do not exist now, deepest first: what a ``mkdir(parents=True)`` would make."""
    made = []
    p = Path(os.path.abspath(path))
    while not os.path.lexists(p) and p != p.parent:
        made.append(p)
        p = p.parent
    return made


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns)


KEPT = "partial results kept in {}; rerun the same command to resume"


@contextmanager
def results_folder_on_failure(folder: str | os.PathLike, resume_file: str | None = None) -> Iterator[None]:
    """Around a command that makes ``folder`` (its ``--out``) and writes into it: when the command fails (an
    error: a Ctrl-C is the command's own to handle), a folder it created is removed again, with the parents it
    created, unless it holds a ``resume_file`` this command wrote (a checkpoint that the same command resumes).
    That one is kept and the error line says so (unless it already tells to run the same command).  A folder that
    was there before is never removed, nor is anything in it: a failed run on a full disk left an empty or partial
    folder that the next run then had to be pointed past, or refused (``train``: "not empty")."""
    path = Path(folder)
    created = _missing_levels(path)
    before = _stamp(path / resume_file) if resume_file else None
    try:
        yield
    except Exception as e:
        now = _stamp(path / resume_file) if resume_file else None
        if now is not None and now != before:  # this run's checkpoint: the same command resumes from it
            if isinstance(e, AttnvizError) and "the same command" not in str(e):  # (train's interrupts say it)
                # the same error, its line lengthened: its kind (a model crash, ...) is what callers tell apart
                e.args = (f"{e}; {KEPT.format(path)}", *e.args[1:])
            raise
        if created and os.path.isdir(created[0]) and not os.path.islink(created[0]):
            shutil.rmtree(created[0], ignore_errors=True)  # made by this command: everything in it is its own
            for parent in created[1:]:
                try:
                    os.rmdir(parent)  # only while empty
                except OSError:
                    break
        raise


def staging_folder(target: str | os.PathLike, flag: str = "--out") -> Path:
    """A new hidden folder beside ``target`` (same file system) to write a whole output folder into before
    :func:`publish_folder` renames it: a folder that cannot be written is one line naming ``flag``, never an OSError."""
    target = Path(target)
    parent = target.resolve().parent
    try:
        return Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=parent))
    except OSError as e:
        raise AttnvizError(f"cannot write in {parent}: {e.strerror or e}; choose a writable {flag}") from None


def publish_folder(staging: str | os.PathLike, target: str | os.PathLike, replace: bool = False) -> Path:
    """Move a fully written ``staging`` folder to ``target`` (absent or empty) in one rename, on the same filesystem.
    ``replace``: a non-empty ``target`` (an earlier output the caller checked is its own, ``--overwrite``) is moved
    aside first and deleted once the new folder is in its place, so a failure before then leaves the old one."""
    target = Path(target)
    if target.exists() and replace and any(target.iterdir()):
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.resolve().parent))
        os.replace(target, old / target.name)
        try:
            os.replace(staging, target)
        except OSError:
            os.replace(old / target.name, target)  # the earlier output back where it was
            raise
        shutil.rmtree(old, ignore_errors=True)
        return target
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


def json_bytes(obj: Any, **dumps: Any) -> bytes:
    """``obj`` as the JSON files attnviz writes hold it (indented by 2 unless ``dumps`` says otherwise)."""
    return (json.dumps(obj, **(dumps or {"indent": 2})) + "\n").encode("utf-8")


def atomic_write_json(path: str | os.PathLike, obj: Any, flag: str = "", sync: bool = False, **dumps: Any) -> Path:
    return atomic_write_bytes(path, json_bytes(obj, **dumps), flag, sync)


PathLike = str | os.PathLike
MAX_FOLDER_FILES = 100_000  # an input folder's files are listed for their identities up to this many


@dataclass(frozen=True)
class _Input:
    what: str  # "the model", "the --texts file": how the refusal names it
    path: Path  # resolved (links followed)
    ids: frozenset[tuple[int, int]]  # (device, inode) of the file, or of every file in the folder
    folder: bool = False  # a folder standing for every file in it (a model's export folder)


_DECLARED: ContextVar[tuple[_Input, ...]] = ContextVar("attnviz_declared_inputs", default=())


def _identity(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def _files(folder: Path) -> frozenset[tuple[int, int]]:
    """The files directly in ``folder`` (a model export's folder): sub-folders are not read as the model, and a
    results folder the user keeps inside it stays theirs to rewrite."""
    ids: set[tuple[int, int]] = set()
    try:
        with os.scandir(folder) as entries:
            for n, e in enumerate(entries):
                if n >= MAX_FOLDER_FILES:
                    break
                try:
                    st = os.stat(e.path)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    ids.add(_identity(st))
    except OSError:
        pass
    return frozenset(ids)


def _declare(what: str, path: PathLike) -> _Input | None:
    p = Path(path)
    try:
        st = os.stat(p)
    except (OSError, ValueError):
        return None  # not there (yet): nothing to protect; its reader reports it
    ids = _files(p) if stat.S_ISDIR(st.st_mode) else frozenset({_identity(st)})
    return _Input(what, p.resolve(), ids, stat.S_ISDIR(st.st_mode))


def _clobbers(out: Path, inp: _Input) -> bool:
    try:
        st = os.stat(out)
    except (OSError, ValueError):
        st = None
    if st is not None and _identity(st) in inp.ids:  # the file itself, through a symlink or a hard link
        return True
    return out.resolve() == inp.path  # an input folder named as an output file


def _refuse(out: Path, flag: str, inputs: Iterable[_Input]) -> None:
    for inp in inputs:
        if _clobbers(out, inp):
            if inp.folder and out.resolve() != inp.path:  # a file of the folder, maybe this command's own last output:
                # every file in it counts as read (which the model's opener reads is the runtime's to know)
                raise AttnvizError(
                    f"{flag} {out} is a file in {inp.path} ({inp.what}), a folder this command reads: writing would "
                    f"overwrite an input file of that folder and destroy it; choose {flag} outside it"
                )
            raise AttnvizError(
                f"{flag} {out} is {inp.what} this command reads: writing would overwrite an input file and destroy it; "
                f"choose another {flag}"
            )


def guard(
    inputs: Mapping[str, PathLike | Iterable[PathLike] | None],
    outputs: Mapping[str, PathLike | Iterable[PathLike] | None],
) -> None:
    """Declare what a command reads (``{"the model": path, "the --texts file": path, ...}``, a folder standing for
    every file in it) and writes (``{"--out": path or paths}``); refuse in one line when an output would replace
    an input.  Call it before anything is written; the inputs stay declared for :func:`atomic_path`."""
    declared = [d for what, ps in inputs.items() for p in _many(ps) if (d := _declare(what, p)) is not None]
    for flag, outs in outputs.items():
        for out in _many(outs):
            _refuse(Path(out), flag, declared)
    _DECLARED.set(_DECLARED.get() + tuple(declared))


def _many(ps: PathLike | Iterable[PathLike] | None) -> list[PathLike]:
    if ps is None or ps == "":
        return []
    if isinstance(ps, (str, os.PathLike)):
        return [ps]
    return [p for p in ps if p]


@contextmanager
def command_scope() -> Iterator[None]:
    """Inputs declared inside are forgotten on exit (the CLI wraps each command in one, a corpus run is one):
    a process that runs many commands must not keep protecting files long gone, whose inode numbers the file
    system hands out again."""
    token = _DECLARED.set(_DECLARED.get())
    try:
        yield
    finally:
        _DECLARED.reset(token)
