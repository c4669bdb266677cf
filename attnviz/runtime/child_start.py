"""Starting the crash-isolation child's process (stdlib only: no onnx), and starting it early.

A command that will run a model starts its child with :func:`start_early` before it imports onnx and attnviz's
engine, so the child's onnxruntime loads while this process loads onnx and attnviz and reads the model (two cores:
the child is ready when the first session is asked for; started after those imports it was ~0.1 s behind).  There
the child is a fork of this process taken just after numpy's import (:func:`fork`): it starts with the interpreter
and numpy already loaded, where a fresh one (:func:`spawn`) paid for both again (~0.09 s CPU of a first map's
~0.47 s, MiniLM: bench/RESULTS.md, session 22).  Only a process with nothing a fork must not copy forks: one
Python thread, neither onnxruntime nor a GUI toolkit or torch loaded (their threads, environments and device state),
no malloc tunable to set at exec; anything else, and every later child (after a crash, a cancel, in the window), is
a fresh interpreter.
:class:`attnviz.runtime.child.ChildProcess` takes the early process over (:func:`take_early`) or spawns one itself;
one never taken over is stopped at exit.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from attnviz.runtime import lifetime, shm


@dataclass
class Started:
    """A child process just started: its shared-memory folder, the process, this end of its socket (a descriptor)
    and the lifeline whose other end the child watches (runtime/lifetime.py)."""

    outdir: str
    proc: _Popen | _Forked
    fd: int
    lifeline: int

    def stop(self) -> None:
        """Stop a process nobody took over: killed, waited for, its descriptors closed and its folder removed."""
        self.proc.kill()
        self.proc.wait(5)
        for fd in (self.fd, self.lifeline):
            os.close(fd)
        shm.release(self.outdir)


class _Popen(subprocess.Popen):
    def wait(self, timeout=None):
        try:
            return super().wait(timeout)
        except subprocess.TimeoutExpired:
            return None


def shm_dir() -> str | None:
    d = "/dev/shm"
    return d if os.path.isdir(d) and os.access(d, os.W_OK) else None


def huge_pages_env(environ) -> dict[str, str]:
    """``ATTNVIZ_HUGEPAGES=1``: the child's malloc asks for transparent huge pages (glibc >= 2.35
    ``glibc.malloc.hugetlb=1``: madvise on its mappings), so onnxruntime's packed weights and arena sit in 2 MB
    pages.  Off by default since session 9: it saved ~3-4 % of CPU per MiniLM run at 512 tokens, but where THP
    defrags on madvise (the Debian/Ubuntu default) every new 2 MB page of a long input's attention scores is
    compacted for: at 4,096 tokens the child's first runs spent 6 s and 4 s of system time (a plain process 0.7 s)
    and its steady runs were 5.2 s against 4.6 s without (bench/RESULTS.md, "On-demand at 4,096 tokens").  A
    tunable the user set already wins."""
    if environ.get("ATTNVIZ_HUGEPAGES") != "1" or not sys.platform.startswith("linux"):
        return {}
    have = environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb" in have:
        return {}
    return {"GLIBC_TUNABLES": ":".join(t for t in (have, "glibc.malloc.hugetlb=1") if t)}


CUDA_EARLY_ENV = "ATTNVIZ_CUDA_CONTEXT_EARLY"  # a spawned child makes the CUDA context first (runtime/cuda_warm.py)


def spawn(cuda: bool = False) -> Started:
    """Start the child (posix): a fresh interpreter running worker.py.  Unlike multiprocessing's spawn it never
    re-imports the user's __main__ (a script without a main guard, stdin, a notebook), and a fork would copy
    Qt/torch."""
    outdir = shm.make(shm_dir())  # attnviz-host-<this pid>-XXXXXXXX; stale ones of dead owners go first
    mine, theirs = socket.socketpair()
    root = str(Path(__file__).resolve().parents[2])  # the attnviz this process uses, not another install
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    env.update(huge_pages_env(os.environ))
    env.pop(CUDA_EARLY_ENV, None)
    if cuda:
        env[CUDA_EARLY_ENV] = "1"
    # the child dies with this process (runtime/lifetime.py): it watches `watch`, whose other end only this
    # process holds; the Linux parent-death signal only when spawned from the main thread
    watch, lifeline = lifetime.lifeline()
    main = "1" if threading.current_thread() is threading.main_thread() else "0"
    script = str(Path(__file__).with_name("worker.py"))
    args = [str(theirs.fileno()), outdir, str(watch), str(os.getpid()), main]
    from attnviz.runtime import quiet_stderr

    # another thread may be muting stderr around an encode (a tokenizer panic's report): the child gets the
    # terminal's, not /dev/null for life
    with quiet_stderr.terminal() as err:
        proc = _Popen(
            [sys.executable, script, *args],
            pass_fds=(theirs.fileno(), watch),
            stdin=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )
    theirs.close()
    os.close(watch)
    return Started(outdir, proc, mine.detach(), lifeline)


# modules whose state a forked child must not inherit (their threads, a display connection, a device context):
# onnxruntime's own too (its environment and thread pools), which the child must set up itself
NO_FORK_WITH = ("onnxruntime", "PySide6", "PySide2", "PyQt6", "PyQt5", "torch", "tensorflow", "jax")


def forkable() -> bool:
    """Whether :func:`fork` may start the child here (see the module's text)."""
    return (
        sys.platform.startswith("linux")
        and threading.current_thread() is threading.main_thread()
        and threading.active_count() == 1
        and not any(m in sys.modules for m in NO_FORK_WITH)
        and not huge_pages_env(os.environ)
    )


def fork(cuda: bool = False) -> Started:
    """Start the child (Linux, where :func:`forkable`) as a fork of this process once numpy is imported: it imports
    onnxruntime and attnviz's child modules itself, then serves as worker.py does (:func:`worker.serve_child`).
    Only the child's own descriptors stay open in it besides stdin/out/err; it leaves through ``os._exit`` (no
    exit handler of this process runs twice, no buffer is written twice)."""
    import numpy  # noqa: F401  (the child inherits it loaded: the point of forking)

    # and the child's own modules (numpy-level: slots, chain, steps, ...), most of which this process imports for
    # its engine anyway: loaded once, here, where the child would load them again (~6 ms CPU)
    from attnviz.runtime.worker import serve_child

    outdir = shm.make(shm_dir())
    mine, theirs = (s.detach() for s in socket.socketpair())  # plain descriptors: no object closes one in the child
    watch, lifeline = lifetime.lifeline()
    parent = os.getpid()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()  # what this process buffered is written once, by this process
        except (OSError, ValueError):
            pass
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the parent's (worker.py's first act)
            os.close(mine)
            os.close(lifeline)  # else the child would hold its own watch's other end, and never see the parent go
            null = os.open(os.devnull, os.O_RDONLY)  # stdin as spawn() gives it: the terminal is the parent's
            os.dup2(null, 0)
            os.close(null)
            _name(FORKED_NAME)
            if cuda:  # (a thread of the child's own: the parent had one thread and no CUDA state to fork)
                from attnviz.runtime import cuda_warm

                cuda_warm.start()
            serve_child(theirs, outdir, watch, parent, True)
        except BaseException:
            code = 1
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(theirs)
    os.close(watch)
    return Started(outdir, _Forked(pid), mine, lifeline)


FORKED_NAME = b"attnviz-worker"  # a forked child's process name (ps, top): its command line is the parent's


def _name(name: bytes) -> None:  # pragma: no cover - runs in the forked child
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, name, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the name is only what ps shows
        pass


PR_SET_NAME = 15  # <linux/prctl.h>


class _Forked:
    """:class:`subprocess.Popen`'s part that :class:`attnviz.runtime.child.ChildProcess` uses, for a forked child."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: gone, its status unknown
                self.returncode = -signal.SIGKILL
                return self.returncode
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit status, or None where the child still runs after ``timeout`` seconds (as ``_Popen.wait``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.0005
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(delay)  # Popen.wait's own back-off on posix: no blocking waitpid that a timeout could not stop
            delay = min(delay * 2, 0.05)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


_early: Started | None = None
_lock = threading.Lock()


def start_early(cuda: bool = False) -> None:
    """Start the child now for the command's first session (see the module's text); nothing where sessions run in
    this process (``ATTNVIZ_INPROCESS``), off posix, or where one is started or running already.  ``cuda``: that
    session will ask for CUDA, so the child makes the device's context on a thread from its start, while it imports
    onnxruntime (runtime/cuda_warm.py: a corpus worker's CUDA session 0.49 -> 0.31 s on an H200)."""
    global _early
    if os.name != "posix" or os.environ.get("ATTNVIZ_INPROCESS"):
        return
    host = sys.modules.get("attnviz.runtime.host")
    if host is not None and host.running():  # a child already serves this process (a second command in it)
        return
    with _lock:
        if _early is None:
            _early = fork(cuda) if forkable() else spawn(cuda)


def take_early() -> Started | None:
    """The process :func:`start_early` started, handed over once (None: none, or it died meanwhile: stopped)."""
    global _early
    with _lock:
        started, _early = _early, None
    if started is not None and started.proc.poll() is not None:
        started.stop()
        return None
    return started


@atexit.register
def _stop_untaken() -> None:
    started = take_early()
    if started is not None:
        started.stop()
