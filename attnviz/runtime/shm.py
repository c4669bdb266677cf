"""The crash-isolation child's shared-memory folders, ``attnviz-host-<pid>-XXXXXXXX`` in /dev/shm (stdlib only).

Each host (:mod:`attnviz.runtime.host`) keeps its slot files in a folder named after the process that owns it,
the parent.  Three things remove it, so that none outlives both processes for long:

- the parent, when it stops its child (``child.ChildProcess.kill``: a crash, a cancel, :func:`~attnviz.runtime.host.shutdown`
  at exit);
- the child, when its parent goes without doing so (killed by a signal, ``os._exit``): the socket then reads end
  of file and the child removes the folder before it exits (``worker.py``);
- the next host this user starts (:func:`make`), for folders both missed (parent and child killed together, e.g.
  SIGKILL to the process group): it removes the siblings whose owner is no longer running (:func:`sweep`).

/dev/shm is shared and world-writable, so the sweep touches only a name that parses, a real folder (never a
link: checked on the folder opened without following links), owned by this user, whose owner pid does not exist
and whose owner does not hold its lock.  The lock (``flock`` on the folder, held while the host lives) keeps a
folder of a live process in another pid namespace sharing /dev/shm safe; a reused pid only makes a stale folder
wait for a later sweep.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile

__all__ = ["PREFIX", "make", "owner", "release", "sweep"]

PREFIX = "attnviz-host-"
_NAME = re.compile(r"attnviz-host-([1-9][0-9]{0,9})-[a-z0-9_]{8}")  # mkdtemp's suffix: 8 of [a-z0-9_]
_locks: dict[str, int] = {}  # this process's folders -> the descriptor holding each one's lock


def owner(name: str) -> int | None:
    """The owner pid in a folder's name, or None where the name is not one of ours."""
    m = _NAME.fullmatch(name)
    pid = int(m.group(1)) if m else 0
    return pid if 0 < pid < 1 << 31 else None  # (a pid beyond a C int is not one: os.kill would overflow)


def make(base: str | None) -> str:
    """A new folder for a host of this process, in ``base`` (None: the temporary folder), after removing the
    stale ones there.  Its lock is held until :func:`release`."""
    sweep(base)
    path = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base)
    if _CAN_LOCK:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a sweep's LOCK_EX then fails while this lives
        except OSError:
            os.close(fd)
        else:
            _locks[path] = fd
    return path


def release(path: str) -> None:
    """Remove a folder :func:`make` made, and drop its lock.  Only its owner removes it: a forked child that
    inherited a host (and runs its exit handlers) leaves its parent's folder alone."""
    if owner(os.path.basename(path)) == os.getpid():
        shutil.rmtree(path, ignore_errors=True)
    fd = _locks.pop(path, None)
    if fd is not None:
        os.close(fd)


def _uid() -> int:
    return os.getuid()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # posix only: on Windows os.kill would terminate the process (no sweep there)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: a process of another user has that pid
        return True
    return True


def sweep(base: str | None) -> list[str]:
    """Remove this user's host folders in ``base`` whose owner is no longer running; the names removed.  Never
    raises: a folder that cannot be checked or removed stays."""
    if not _CAN_SWEEP:
        return []
    removed: list[str] = []
    try:
        dfd = os.open(base or tempfile.gettempdir(), os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return removed
    try:
        try:
            with os.scandir(dfd) as entries:
                names = [e.name for e in entries if owner(e.name) is not None]
        except OSError:
            names = []
        me, uid = os.getpid(), _uid()
        for name in names:
            pid = owner(name)
            if pid is None or pid == me or _alive(pid):
                continue
            try:
                if _remove_stale(dfd, name, uid):
                    removed.append(name)
            except OSError:
                pass
    finally:
        os.close(dfd)
    return removed


def _remove_stale(dfd: int, name: str, uid: int) -> bool:
    import fcntl

    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
        return False
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
    try:
        if not os.path.samestat(st, os.fstat(fd)):  # replaced between the two looks
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # its owner lives (in another pid namespace, or it inherited the folder)
            return False
        # rmtree works through descriptors here (avoids_symlink_attacks): links inside are removed, not followed
        shutil.rmtree(name, dir_fd=dfd)
    finally:
        os.close(fd)
    return True


_CAN_LOCK = os.name == "posix"
_CAN_SWEEP = os.name == "posix" and shutil.rmtree.avoids_symlink_attacks and os.scandir in os.supports_fd
