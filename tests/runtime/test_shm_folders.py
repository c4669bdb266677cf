"""The hosts' shared-memory folders never pile up in /dev/shm (attnviz/runtime/shm.py, worker.py's exit).

A folder is ``attnviz-host-<owner pid>-XXXXXXXX``.  Its parent removes it when it stops the child; the child
removes it when the parent goes without doing so (killed by a signal, os._exit); the next host started removes
the folders of owners no longer running (both processes killed at once).  The sweep runs in a shared,
world-writable folder, so it must leave alone anything that is not plainly this user's stale folder."""

from __future__ import annotations

import fcntl
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from attnviz.runtime import host, shm

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the child and /dev/shm are posix")

ROOT = Path(__file__).resolve().parents[2]
# SIGHUP back to its default: a suite started under nohup hands every child an ignored SIGHUP, and the owner would
# outlive the hang-up this test sends it
OWNER = r"""
import os, signal, sys
signal.signal(signal.SIGHUP, signal.SIG_DFL)
from attnviz.runtime import host
h = host._current_host()
print(h.outdir, h.proc.pid, flush=True)
how = sys.stdin.readline().strip()
if how == "_exit":
    os._exit(0)
"""


class Owner:
    """A process (in its own session) that started a host and waits for a line: its folder and child."""

    def __init__(self):
        self.p = subprocess.Popen(
            [sys.executable, "-c", OWNER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,  # this checkout's attnviz
            start_new_session=True,
        )
        assert self.p.stdin is not None and self.p.stdout is not None
        outdir, worker = self.p.stdout.readline().split()
        self.outdir, self.worker = outdir, int(worker)
        self.worker_fd = os.pidfd_open(self.worker)  # now, while it is alive: its pid cannot be reused yet

    def wait(self) -> None:
        """Until the owner and its child have both exited (the child is not ours to wait for: its pidfd)."""
        self.p.wait(60)
        ready, _, _ = select.select([self.worker_fd], [], [], 60)
        assert ready, "the host's child did not exit"

    def close(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(60)
        for f in (self.p.stdin, self.p.stdout):
            if f is not None:
                f.close()
        os.close(self.worker_fd)


@pytest.fixture
def owners():
    made: list[Owner] = []

    def start() -> Owner:
        made.append(Owner())
        return made[-1]

    yield start
    for o in made:
        o.close()
        shutil.rmtree(o.outdir, ignore_errors=True)  # never leave one behind, even when a test fails


needs_pidfd = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="waits on the grandchild through a pidfd")


def _of(pid: int, base: str) -> list[str]:
    return [n for n in os.listdir(base) if shm.owner(n) == pid]


@needs_pidfd
@pytest.mark.parametrize("how", ["_exit", "SIGTERM", "SIGKILL", "SIGHUP"])
def test_a_parent_that_ends_without_stopping_its_child_leaves_no_folder(owners, how):
    """Each of these left an empty folder per run before: no atexit handler runs, and the child only exited."""
    o = owners()
    base = os.path.dirname(o.outdir)
    assert os.path.basename(o.outdir).startswith(f"attnviz-host-{o.p.pid}-")
    assert _of(o.p.pid, base) == [os.path.basename(o.outdir)]
    if how == "_exit":
        o.p.stdin.write("_exit\n")
        o.p.stdin.flush()
    else:
        o.p.send_signal(getattr(signal, how))  # the owner alone: its child sees the socket close
    o.wait()
    assert o.p.returncode == (0 if how == "_exit" else -getattr(signal, how))
    assert _of(o.p.pid, base) == []


@needs_pidfd
def test_a_new_host_removes_a_killed_owners_folder_and_keeps_a_live_ones(owners):
    dead, live = owners(), owners()
    os.killpg(dead.p.pid, signal.SIGKILL)  # owner and child together (the process group): neither cleans up
    dead.wait()
    assert os.path.isdir(dead.outdir)
    h = host._Host()
    try:
        assert os.path.basename(h.outdir).startswith(f"attnviz-host-{os.getpid()}-")
        assert not os.path.exists(dead.outdir)
        assert os.path.isdir(live.outdir) and live.p.poll() is None
        assert h.call("trace", what="checking the child") == []  # the new host works
    finally:
        h.kill()
    assert not os.path.exists(h.outdir)
    live.p.stdin.close()  # end of input: the live owner exits normally and removes its folder at exit
    live.wait()
    assert live.p.returncode == 0 and not os.path.exists(live.outdir)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", ""])
    p.wait()
    return p.pid  # reaped: no process has it (until the pid space wraps around, far beyond this test)


def test_the_sweep_touches_only_this_users_stale_folders(tmp_path):
    dead = _dead_pid()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("x")
    base = tmp_path / "shm"
    base.mkdir()

    def folder(name: str) -> Path:
        (base / name).mkdir()
        (base / name / "slot-1").write_bytes(b"\0" * 64)
        return base / name

    stale = folder(f"attnviz-host-{dead}-abcdefgh")  # the one folder that goes
    (stale / "inside").symlink_to(outside, target_is_directory=True)  # removed as a link, never followed
    link = base / f"attnviz-host-{dead}-linkxxxx"
    link.symlink_to(outside, target_is_directory=True)
    (base / f"attnviz-host-{dead}-filexxxx").write_text("a file, not a folder")
    unparsable = [
        folder(n)
        for n in (
            "attnviz-host-abcdefgh",  # the old names, without an owner
            f"attnviz-host-{dead}",
            f"attnviz-host-{dead}-abcdefgh.x",
            f"attnviz-host-{dead}-ABCDEFGH",
            f"attnviz-host-0{dead}-abcdefgh",
            "attnviz-host-99999999999-abcdefgh",
            f"attnviz-host--{dead}-abcdefgh",
            f"xattnviz-host-{dead}-abcdefgh",
        )
    ]
    live = folder(f"attnviz-host-{os.getppid()}-livexxxx")  # pytest's parent: alive, no lock held
    mine = folder(f"attnviz-host-{os.getpid()}-minexxxx")
    locked = folder(f"attnviz-host-{dead}-lockxxxx")  # owner gone from this pid namespace, lock still held
    lock = os.open(locked, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(lock, fcntl.LOCK_SH)
    try:
        removed = shm.sweep(str(base))
    finally:
        os.close(lock)
    assert removed == [stale.name]
    assert not stale.exists()
    assert link.is_symlink() and (outside / "keep.txt").read_text() == "x"
    assert (base / f"attnviz-host-{dead}-filexxxx").is_file()
    for d in [*unparsable, live, mine, locked]:
        assert (d / "slot-1").is_file(), d.name
    assert shm.sweep(str(base)) == [locked.name]  # its lock released: stale now


def test_the_sweep_leaves_another_users_folder(tmp_path, monkeypatch):
    theirs = tmp_path / f"attnviz-host-{_dead_pid()}-otheruid"
    theirs.mkdir()
    (theirs / "slot-1").write_bytes(b"\0" * 64)
    if os.getuid() == 0:
        os.chown(theirs, 12345, 12345)  # really another user's
    else:  # a folder cannot be given away: this process plays another user instead
        monkeypatch.setattr(shm, "_uid", lambda: os.getuid() + 1)
    assert shm.sweep(str(tmp_path)) == []
    assert (theirs / "slot-1").is_file()
    monkeypatch.setattr(shm, "_uid", lambda: theirs.stat().st_uid)  # were it this user's, it would go
    assert shm.sweep(str(tmp_path)) == [theirs.name] and not theirs.exists()


def test_only_the_owner_removes_its_folder(tmp_path):
    """A forked child inherits the host and may run its exit handlers: it must not remove its parent's folder."""
    path = shm.make(str(tmp_path))
    assert shm.owner(os.path.basename(path)) == os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the forked child
        shm.release(path)
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.path.isdir(path)
    shm.release(path)
    assert not os.path.exists(path)


def test_the_host_folder_is_in_dev_shm_named_after_its_owner():
    h = host._Host()
    try:
        assert os.path.dirname(h.outdir) == (host._shm_dir() or tempfile.gettempdir())
        assert shm.owner(os.path.basename(h.outdir)) == os.getpid()
    finally:
        h.kill()
    assert not os.path.exists(h.outdir)
