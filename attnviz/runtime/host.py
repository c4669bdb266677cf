"""Crash isolation: onnxruntime sessions live in a child process, so a native fault kills the child, not the app.

Untrusted models reach code paths in onnxruntime that abort the process (a 115-byte ONNX ``Attention`` with
``q_num_heads=0`` dies with SIGFPE while the session is created).  :func:`make_session` therefore returns a
:class:`RemoteSession` whose sessions are created and run in one long-lived child (spawned on first use and
kept across runs, so a run costs a pipe round trip, not a process start).  Large outputs come back as ``.npy``
files in a memory-backed folder that the parent maps copy-on-write: one copy in the child, none in the parent.

When the child dies the call raises :class:`ModelCrashed` ("the model crashed onnxruntime: ..."); the next
call starts a fresh child and re-creates the sessions of other models transparently.  A run whose caller was
cancelled (see :func:`cancel_scope`) kills the child, which really stops onnxruntime mid-run.

``ATTNVIZ_INPROCESS=1`` runs sessions in this process instead (debugging, profiling).
"""

from __future__ import annotations

import atexit
import itertools
import multiprocessing as mp
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

from attnviz import AttnvizError
from attnviz.runtime.errors import Cancelled

# outputs up to 64 kB travel through the pipe; larger ones through a mapped file (a pickled map is copied four
# times on its way; a file once, and the parent maps it: 1.52x -> 1.32x plain at 128 tokens, bench/RESULTS.md)
INLINE_BYTES = 1 << 16
POLL_S = 0.05  # how often a waiting call checks its caller's cancel flag


class ModelCrashed(AttnvizError):
    """The child running onnxruntime died (a native fault in the model's ops)."""


class RunCancelled(Cancelled):
    """The caller cancelled while onnxruntime was running; the child was stopped."""


class RemoteRunError(RuntimeError):
    """onnxruntime raised inside the child; the text is onnxruntime's own message."""


@dataclass(frozen=True)
class NodeArg:
    """What ``InferenceSession.get_inputs()/get_outputs()`` items offer that callers use."""

    name: str
    type: str
    shape: tuple


# -- cancellation scope (thread-local: each GUI worker thread has its own flag) -------------------------
_scope = threading.local()


@contextmanager
def cancel_scope(cancelled):
    """While inside, remote calls made by this thread poll ``cancelled()`` and stop the child when it is True."""
    prev = getattr(_scope, "check", None)
    _scope.check = cancelled
    try:
        yield
    finally:
        _scope.check = prev


def _cancel_requested() -> bool:
    check = getattr(_scope, "check", None)
    return bool(check is not None and check())


# -- the child ------------------------------------------------------------------------------------------
def _serve(conn, outdir: str) -> None:  # pragma: no cover - runs in the child process
    from attnviz.runtime.session import make_session as local_session

    sessions = {}
    keep = {}
    counter = itertools.count()
    while True:
        try:
            op, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if op == "create":
                sid, model, kwargs = args
                if kwargs.get("initializers"):  # weights handed over as arrays: OrtValues that share their memory
                    import onnxruntime as ort

                    names, arrays = kwargs["initializers"]
                    kwargs = dict(kwargs, initializers=(names, [ort.OrtValue.ortvalue_from_numpy(a) for a in arrays]))
                    keep[sid] = (arrays, kwargs["initializers"])  # must outlive the session
                sess, note = local_session(model, **kwargs)
                sessions[sid] = sess
                desc = [
                    [NodeArg(a.name, a.type, tuple(a.shape)) for a in getattr(sess, f"get_{k}")()]
                    for k in ("inputs", "outputs")
                ]
                reply = (note, sess.get_providers(), desc[0], desc[1])
            elif op == "run":
                sid, names, feeds, bound = args
                values = _run_local(sessions[sid], names, feeds, bound)
                reply = [_pack(v, outdir, counter) for v in values]
            elif op == "close":
                for sid in args[0]:
                    sessions.pop(sid, None)
                    keep.pop(sid, None)
                reply = None
            else:
                raise ValueError(f"unknown op {op!r}")
            conn.send(("ok", reply))
        except BaseException as e:
            conn.send(
                (
                    "attnviz" if isinstance(e, AttnvizError) else "error",
                    f"{type(e).__name__}: {e}" if not isinstance(e, AttnvizError) else str(e),
                )
            )


def _run_local(sess, names, feeds, bound):
    if not bound:
        return sess.run(names, feeds)
    io = sess.io_binding()  # outputs in onnxruntime-allocated buffers: no extra copy before the file write
    for k, v in feeds.items():
        io.bind_cpu_input(k, np.ascontiguousarray(v))
    for n in names:
        io.bind_output(n, "cpu")
    sess.run_with_iobinding(io)
    return [o.numpy() for o in io.get_outputs()]


def _pack(v, outdir, counter):
    v = np.asarray(v)
    if v.nbytes <= INLINE_BYTES or v.dtype.hasobject:
        return ("inline", v)
    path = os.path.join(outdir, f"out-{next(counter)}.npy")
    np.save(path, v)
    return ("file", path)


def _unpack(item):
    kind, value = item
    if kind == "inline":
        return value
    try:
        # copy-on-write map: callers may write into it; the pages stay valid after the unlink
        return np.load(value, mmap_mode="c", allow_pickle=False)
    finally:
        Path(value).unlink(missing_ok=True)


# -- the parent's handle on the child -------------------------------------------------------------------
class _Host:
    """One child process; requests are serialised by a lock (onnxruntime parallelises inside a run)."""

    def __init__(self):
        self.outdir = tempfile.mkdtemp(prefix="attnviz-host-", dir=_shm_dir())
        if os.name == "posix":
            # a fresh interpreter running this module: unlike multiprocessing's spawn it never re-imports the
            # user's __main__ (a script without a main guard, stdin, a notebook), and a fork would copy Qt/torch
            mine, theirs = socket.socketpair()
            root = str(Path(__file__).resolve().parents[2])  # the attnviz this process uses, not another install
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
            self.proc = _Popen(
                [sys.executable, "-m", "attnviz.runtime.worker", str(theirs.fileno()), self.outdir],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=env,
            )
            theirs.close()
            self.conn = Connection(mine.detach())
        else:  # pragma: no cover - Windows has no pass_fds
            ctx = mp.get_context("spawn")
            self.conn, child = ctx.Pipe()
            self.proc = _MpProcess(ctx.Process(target=_serve, args=(child, self.outdir), daemon=True))
            child.close()
        self.lock = threading.Lock()
        self.generation = next(_generations)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def call(self, op: str, *args, what: str = "running the model"):
        while not self.lock.acquire(timeout=POLL_S):
            if _cancel_requested():
                raise RunCancelled("cancelled")
        try:
            if not self.alive:
                raise _Dead()
            self._close_dropped()
            try:
                self.conn.send((op, args))
            except (OSError, ValueError) as e:
                raise _Dead() from e
            while not self.conn.poll(POLL_S):
                if _cancel_requested():
                    self.kill()
                    raise RunCancelled("cancelled")  # the GUI shows "Cancelled.", not an error
                if not self.alive and not self.conn.poll(0):
                    raise ModelCrashed(
                        f"the model crashed onnxruntime: {self._death()} while {what}; the model cannot be run"
                    )
            try:
                status, reply = self.conn.recv()
            except (EOFError, OSError):
                self.proc.wait(1)
                raise ModelCrashed(
                    f"the model crashed onnxruntime: {self._death()} while {what}; the model cannot be run"
                ) from None
        finally:
            self.lock.release()
        if status == "ok":
            return reply
        if status == "attnviz":
            raise AttnvizError(reply)
        raise RemoteRunError(reply)

    def _close_dropped(self) -> None:
        """Free the child's sessions whose proxies were garbage-collected (their __del__ only queues the id:
        it may run on a thread that holds this lock)."""
        sids = []
        while _dropped:
            try:
                sids.append(_dropped.pop())
            except IndexError:
                break
        if sids:
            try:
                self.conn.send(("close", (sids,)))
                self.conn.recv()
            except (OSError, EOFError, ValueError):
                raise _Dead() from None

    def _death(self) -> str:
        self.proc.wait(2)
        code = self.proc.returncode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"the process was killed by {name}"
        return f"the process exited with code {code}"

    def kill(self) -> None:
        if self.alive:
            self.proc.kill()
        self.proc.wait(5)
        self.conn.close()
        shutil.rmtree(self.outdir, ignore_errors=True)


class _Popen(subprocess.Popen):
    def wait(self, timeout=None):
        try:
            return super().wait(timeout)
        except subprocess.TimeoutExpired:
            return None


class _MpProcess:  # pragma: no cover - the Popen interface over a multiprocessing.Process (Windows)
    def __init__(self, p):
        self.p = p
        p.start()
        self.pid = p.pid

    def poll(self):
        return self.p.exitcode

    def wait(self, timeout=None):
        self.p.join(timeout)
        return self.p.exitcode

    def kill(self):
        self.p.kill()

    @property
    def returncode(self):
        return self.p.exitcode


class _Dead(Exception):
    pass


_generations = itertools.count(1)
_dropped: list[int] = []  # session ids whose proxies are gone (list.append/pop are atomic)
_host: _Host | None = None
_host_lock = threading.Lock()


def _current_host() -> _Host:
    global _host
    with _host_lock:
        if _host is None or not _host.alive:
            if _host is not None:
                _host.kill()
            _host = _Host()
        return _host


def shutdown() -> None:
    """Stop the child (at exit, or in tests that want a fresh one)."""
    global _host
    with _host_lock:
        if _host is not None:
            _host.kill()
            _host = None


atexit.register(shutdown)


def _shm_dir() -> str | None:
    d = "/dev/shm"
    return d if os.path.isdir(d) and os.access(d, os.W_OK) else None


# -- the session proxy ------------------------------------------------------------------------------------
_sids = itertools.count(1)


class RemoteSession:
    """The part of ``onnxruntime.InferenceSession`` attnviz uses, backed by a session in the child."""

    def __init__(self, model: bytes | str, label: str, **kwargs):
        self._model = model  # kept to re-create the session when another model's crash restarted the child
        self._kwargs = kwargs
        self.label = label
        self._sid = next(_sids)
        self._host: _Host | None = None
        self.crashed: str | None = None
        self.note, self._providers, self._inputs, self._outputs = self._ensure()

    def _ensure(self):
        if self.crashed:
            raise ModelCrashed(self.crashed)
        for _ in range(2):  # a child that died before our request (another model's crash, a cancel): start anew
            host = _current_host()
            if self._host is host:
                return None
            try:
                desc = host.call("create", self._sid, self._model, self._kwargs, what="loading the model")
            except _Dead:
                continue
            except ModelCrashed as e:
                self.crashed = str(e)
                raise
            except RemoteRunError as e:  # onnxruntime refused the graph
                raise AttnvizError(f"{self.label}: onnxruntime cannot load this model: {_ort_text(e)}") from None
            self._host = host
            return desc
        raise ModelCrashed("the model crashed onnxruntime: its process could not be started")

    def __del__(self):
        if self._host is not None:
            _dropped.append(self._sid)

    def get_providers(self) -> list[str]:
        return list(self._providers)

    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def run(self, names, feeds, run_options=None, bound: bool = False) -> list[np.ndarray]:
        names = [o.name for o in self._outputs] if names is None else list(names)
        for _ in range(2):
            self._ensure()
            try:
                items = self._host.call("run", self._sid, names, dict(feeds), bound)
            except _Dead:
                self._host = None
                continue
            except ModelCrashed as e:
                self.crashed = str(e)
                raise
            except RunCancelled:
                self._host = None  # the child was stopped; the session is re-created on the next run
                raise
            return [_unpack(i) for i in items]
        raise ModelCrashed("the model crashed onnxruntime: its process could not be started")

    def run_bound(self, names, feeds) -> list[np.ndarray]:
        return self.run(names, feeds, bound=True)


def _ort_text(e: Exception) -> str:
    s = str(e).strip().replace("\n", " ")
    if "[ONNXRuntimeError]" in s:
        s = s.split(" : ")[-1]
    return s[:240]


def isolated() -> bool:
    return not os.environ.get("ATTNVIZ_INPROCESS")


def make_session(
    model: bytes | str,
    provider: str = "auto",
    threads: int | None = None,
    arena: bool = True,
    external_dir: str | None = None,
    label: str = "model",
    initializers=None,
):
    """Like :func:`attnviz.runtime.session.make_session`, but the session runs in the child process.

    ``initializers``: (names, values) the graph needs but does not contain; values are numpy arrays or
    OrtValues (sent to the child as arrays)."""
    from attnviz.runtime import session as local

    if provider not in local.PROVIDERS:  # argument errors need no child
        raise AttnvizError(f"unknown provider {provider!r}; use one of {', '.join(local.PROVIDERS)}")
    extra = {}
    if initializers and initializers[0]:
        names, values = initializers
        extra["initializers"] = (list(names), [v.numpy() if hasattr(v, "numpy") else np.asarray(v) for v in values])
    if not isolated():
        return local.make_session(
            model, provider, threads, arena, external_dir, **({"initializers": initializers} if extra else {})
        )
    sess = RemoteSession(
        model, label, provider=provider, threads=threads, arena=arena, external_dir=external_dir, **extra
    )
    return sess, sess.note
