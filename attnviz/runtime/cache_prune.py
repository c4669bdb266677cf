"""The cache folder (runtime/optcache.py) held to a size cap, the entries used longest ago removed first.

Keys name attnviz's source digest and the libraries' versions, so each edit or upgrade leaves the old entries behind
for good (an optimised graph can be 64 MB): without a cap the folder only grows.  ``ATTNVIZ_CACHE_MAX_MB`` (MB,
default :data:`DEFAULT_MAX_MB`) sets the cap; a value that is not a number >= 0 is refused in one line
(:func:`max_bytes`), as the other ATTNVIZ_ settings are, at a command's first use of the cache (optcache.folder).

Listing the folder costs a stat of every entry, so it is never done on a read: a process's first write lists it once
and keeps a running total, each later write adds its size, and only a total over the cap lists it again and removes
the oldest entries until the folder is under :data:`LOW_WATER` of the cap (the next writes then do not list it
again).  Other processes write too, so the total is an estimate each process corrects when it lists the folder.

"Used" is an entry's modification time: a write sets it and a read refreshes it (:func:`refresh`).  Only files named
as attnviz names its entries (a sha256 in hex, ``.onnx`` for an optimised graph), lying directly in one of the
cache's own kind folders, are counted or removed; links (a kind folder or an entry) are neither followed nor removed,
and nothing outside the folder is touched.  A write's temporary file there (core/writes.atomic_path) counts towards
the cap while it is young (a write in flight: never removed) and is removed, as a killed write's, once older than
:data:`STALE_TEMP_NS`.
"""

from __future__ import annotations

import math
import os
import re
import stat
import time
from collections.abc import Iterable
from pathlib import Path

from attnviz import AttnvizError

CAP_ENV = "ATTNVIZ_CACHE_MAX_MB"
DEFAULT_MAX_MB = 512
LOW_WATER = 0.75  # a prune leaves the folder at this share of the cap
REFRESH_AFTER_NS = 3600 * 10**9  # a read moves an entry's time only where it is older: not a write on every read
_NAME = re.compile(r"[0-9a-f]{64}(\.onnx)?")
# an entry's write in progress: core/writes.atomic_path's tempfile.mkstemp(prefix=".<entry>.", suffix=".tmp")
_TEMP = re.compile(r"\.[0-9a-f]{64}(\.onnx)?\.[a-z0-9_]+\.tmp")
# A temporary file older than this is a killed write's: removed.  The longest write is onnxruntime's optimised graph
# (runtime/session._kept): its file is made before the session, so it stays a temporary file for the whole of a
# session's making, seconds for the models attnviz opens and minutes for the largest; an entry's own write takes
# milliseconds.  A day is hundreds of times the longest, and leaves room for a clock that differs between the hosts
# sharing the folder.  Only a process stopped mid-write for over a day (Ctrl-Z, a suspended laptop) would find its
# file gone, and that costs it the entry alone: the rename fails, and a cache write that fails is not kept
# (optcache._write; session._kept makes the session again without it).
STALE_TEMP_NS = 24 * 3600 * 10**9
# cache folder -> its entries' and writes in flight's bytes as this process last listed them, plus its writes since
_totals: dict[str, int] = {}


def max_bytes() -> int:
    """The cap in bytes: ``ATTNVIZ_CACHE_MAX_MB`` MB (a fraction too), :data:`DEFAULT_MAX_MB` where it is unset or
    blank.  Anything else is refused in one line naming the variable and the fix, as core/limits.py refuses an
    ``ATTNVIZ_MAX_*`` setting: a "2G" or a "-1" quietly taken as 512 MB would prune a cache the user had made larger."""
    raw = os.environ.get(CAP_ENV, "")
    if not raw.strip():
        return DEFAULT_MAX_MB * 2**20
    try:
        mb = float(raw)
    except ValueError:
        mb = math.nan
    if not (math.isfinite(mb) and mb >= 0):
        raise AttnvizError(
            f"{CAP_ENV}={raw!r}: give the cache folder's size cap in MB, 0 or more (e.g. {DEFAULT_MAX_MB}), "
            f"or unset it for {DEFAULT_MAX_MB}"
        )
    return int(mb * 2**20)


def refresh(entry: str | Path) -> None:
    """An entry just read is used: its modification time set to now, where it is older than an hour (a corpus's
    workers read the same entries; a fresh one keeps the time its write gave it)."""
    try:
        st = os.lstat(entry)
        if stat.S_ISREG(st.st_mode) and time.time_ns() - st.st_mtime_ns > REFRESH_AFTER_NS:
            os.utime(entry, follow_symlinks=False)
    except (OSError, NotImplementedError):  # a read-only folder: the entry is as old as its write
        pass


def wrote(root: Path, kinds: Iterable[str], size: int) -> None:
    """After a write of ``size`` bytes into the cache folder ``root``: remove the oldest entries if it is over the cap."""
    key = str(root)
    total = _totals.get(key)
    total = sum(size for _, _, size, _ in _entries(root, kinds)) if total is None else total + size
    cap = max_bytes()
    if total > cap:
        total = _prune(root, kinds, int(cap * LOW_WATER))
    _totals[key] = total


def _entries(root: Path, kinds: Iterable[str]) -> list[tuple[int, str, int, bool]]:
    """(modification time in ns, path, size, whether it is an entry) of each entry in ``root``'s kind folders and
    of each write's temporary file there that is younger than :data:`STALE_TEMP_NS`; older ones are removed."""
    found: list[tuple[int, str, int, bool]] = []
    now = time.time_ns()
    for kind in kinds:
        folder = os.path.join(root, kind)
        try:
            if not stat.S_ISDIR(os.lstat(folder).st_mode):  # missing, or a link in the kind folder's place
                continue
            with os.scandir(folder) as listed:
                for e in listed:
                    entry = _NAME.fullmatch(e.name) is not None
                    if entry or _TEMP.fullmatch(e.name):
                        _list_one(e, entry, now, found)
        except OSError:  # the folder removed meanwhile (another process pruning): listed as it is
            continue
    return found


def _list_one(e: os.DirEntry, entry: bool, now: int, found: list[tuple[int, str, int, bool]]) -> None:
    """One file of a kind folder into ``found``, or removed (a stale temporary file).  A file gone meanwhile (another
    process pruning) is skipped alone: the rest of its folder is still listed and counted."""
    try:
        if not e.is_file(follow_symlinks=False):
            return
        st = e.stat(follow_symlinks=False)
    except OSError:
        return
    if entry or now - st.st_mtime_ns <= STALE_TEMP_NS:
        found.append((st.st_mtime_ns, e.path, st.st_size, entry))
    else:
        _remove(e.path)


def _remove(path: str) -> bool:
    """Whether ``path`` is gone (removed here, or by another process pruning first)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def _prune(root: Path, kinds: Iterable[str], low: int) -> int:
    """Remove the entries used longest ago until ``root``'s entries and writes in flight take at most ``low`` bytes
    (or no entry is left); their total after."""
    found = sorted(_entries(root, kinds))
    total = sum(size for _, _, size, _ in found)
    for _, path, size, entry in found:
        if total <= low:
            break
        if entry and _remove(path):  # a write in flight is its process's, to rename or to remove
            total -= size
    return total
