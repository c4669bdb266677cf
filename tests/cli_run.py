"""``attnviz`` run as a user runs it, in a fresh interpreter, bounded in time (hostile-input tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BOUND_S = 120  # generous for a loaded machine: what these tests guard against is a hang or a crash, not slowness


def run_cli(*argv, cwd=None, bound_s: float = BOUND_S, memory_gb: float | None = None, env=None) -> tuple[int, str]:
    """(exit code, stderr) of ``python -m attnviz.cli ARGV`` with this checkout first on the path; a run past
    ``bound_s`` fails the test (a hang), it is never waited on.  ``memory_gb``: the address space of the run and
    its children is capped there (RLIMIT_AS), so a run that would allocate past it fails instead of swapping.
    ``env``: variables added to this process's environment."""
    env = dict(os.environ, **(env or {}))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    limit = None
    if memory_gb is not None:
        import resource

        cap = int(memory_gb * 2**30)

        def limit():
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    try:
        done = subprocess.run(
            [sys.executable, "-m", "attnviz.cli", *map(str, argv)],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=bound_s,
            stdin=subprocess.DEVNULL,
            preexec_fn=limit,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"attnviz {' '.join(map(str, argv))} still ran after {bound_s} s")
    return done.returncode, done.stderr


# the commands of run_cli_each, one after another in one interpreter; each one's stderr (the file descriptor, so a
# native library's or the interpreter's own output counts too) goes to a file of its own, and each starts from the
# interpreter's environment (a command may set variables for its children: --max-memory's ATTNVIZ_MAX_MEMORY)
_EACH = """
import json, os, sys
from attnviz.cli import main
codes, environ = [], dict(os.environ)
for argv, err in json.loads(sys.argv[1]):
    os.environ.clear()
    os.environ.update(environ)
    sys.stderr.flush()
    saved, fd = os.dup(2), os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        codes.append(main(argv))
    except SystemExit as e:  # argparse's usage errors
        codes.append(e.code)
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
print(json.dumps(codes))
"""


def run_cli_each(*argvs, bound_s: float = BOUND_S, env=None) -> list[tuple[int, str]]:
    """[(exit code, stderr)] of each command of ``argvs`` (``attnviz.cli.main``) run in turn in ONE fresh interpreter
    with this checkout first on the path: a command that imports torch and transformers pays seconds for that, which
    a set of refusals checked one per interpreter paid again for each.  Bounded as :func:`run_cli`, all together."""
    import json
    import tempfile

    env = dict(os.environ, **(env or {}))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory(prefix="attnviz-cli-each-") as tmp:
        errs = [Path(tmp) / f"{i}.err" for i in range(len(argvs))]
        cases = [[list(map(str, argv)), str(err)] for argv, err in zip(argvs, errs)]
        try:
            done = subprocess.run(
                [sys.executable, "-c", _EACH, json.dumps(cases)],
                env=env,
                capture_output=True,
                text=True,
                timeout=bound_s,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"{len(argvs)} attnviz commands in one interpreter still ran after {bound_s} s")
        assert done.returncode == 0, f"the interpreter running {len(argvs)} commands ended {done.returncode}: {done}"
        codes = json.loads(done.stdout.strip().splitlines()[-1])
        return [(code, err.read_text()) for code, err in zip(codes, errs)]


# the commands of run_cli_forked: this interpreter imports what the commands share once, then each command runs in
# a process of its own forked from it, as `python -m attnviz.cli ARGV` runs (its own exit code, its own teardown, the
# interpreter's last words on its stderr), in its own working folder, bounded on its own
_FORKED = """
import importlib, json, os, resource, select, signal, sys, time
with open(sys.argv[1]) as f:
    cases, preload, bound_s, prelude = json.load(f)
for name in preload:
    importlib.import_module(name)
exec(prelude)  # (this script's globals: what it defines lives until a command's interpreter ends, or is left)
from attnviz.cli import main
from attnviz.runtime.child_start import NO_FORK_WITH
# a fork copies only the forking thread: a Python thread already started (by a preloaded module) would be missing in
# the children, holding whatever lock it held; the commands' own threads start in the children, after the fork (a
# native pool that re-forms after a fork, OpenBLAS's, is as in the command's own early fork: child_start.forkable)
import threading
assert threading.active_count() == 1, f"threads after importing {preload}: {threading.enumerate()}"
# nor may the preload change a command's path: its isolation child is forked early only where none of these is loaded
loaded = [m for m in NO_FORK_WITH if m in sys.modules]
assert not loaded, f"importing {preload} loaded {loaded}: the commands would start their children otherwise"
codes = []
for argv, cwd, out, err, cap, env, leave in cases:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the command, as python -m attnviz.cli runs it: sys.exit(main(leave=True))
        for fd, path in ((1, out), (2, err)):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(f, fd)
            os.close(f)
        os.chdir(cwd)
        os.environ.update(env)  # (attnviz reads its variables when a command runs, not when it is imported)
        if cap is not None:  # as run_cli's memory_gb: this process and every child it starts
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        sys.argv = ["attnviz", *argv]
        sys.exit(main(leave=leave))  # SystemExit leaves this script: the child's interpreter ends with the code
    try:
        fd = os.pidfd_open(pid)
    except OSError:  # a kernel before 5.3: the child's end polled for, up to the bound
        deadline = time.monotonic() + bound_s
        done, status = os.waitpid(pid, os.WNOHANG)
        while not done and time.monotonic() < deadline:
            time.sleep(0.01)
            done, status = os.waitpid(pid, os.WNOHANG)
        if not done:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        codes.append(os.waitstatus_to_exitcode(status) if done else None)
        continue
    ready, _, _ = select.select([fd], [], [], bound_s)
    os.close(fd)
    if not ready:  # a hang: reported as such, not waited on
        os.kill(pid, signal.SIGKILL)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    codes.append(code if ready else None)
print(json.dumps(codes))
"""

# what most commands import before they read their inputs: the model layer (onnx, numpy; not onnxruntime), the
# figures' (matplotlib), the corpus's and PIL's (0.1-1 s a command, which then imports only what is its own)
PRELOAD = ("attnviz.runtime.model", "attnviz.figures.render", "attnviz.figures.spec", "attnviz.corpus.run", "PIL.Image")


@dataclass(frozen=True, kw_only=True)
class Alone:
    """What :func:`run_cli` gives one command, for a command of :func:`run_cli_forked`: ``memory_gb`` caps its
    forked process's address space (RLIMIT_AS, set before the command starts: it and every child it starts are held
    there, as run_cli's are), ``env`` sets variables in it only."""

    memory_gb: float | None = None
    env: dict[str, str] = field(default_factory=dict)
    leave: bool = True  # False: main(leave=False), the interpreter's teardown after it (a script calling main())


def run_cli_forked(
    *cases: tuple[list, Path] | tuple[list, Path, Alone],
    preload: tuple[str, ...] = PRELOAD,
    bound_s: float = BOUND_S,
    env=None,
    prelude: str = "",
    with_stdout: bool = False,
) -> list[tuple[int | None, str]] | list[tuple[int | None, str, str]]:
    """[(exit code, stderr)] of each ``(argv, cwd)`` of ``cases``, each ``attnviz ARGV`` run with that working
    folder in a process of its own, as :func:`run_cli` runs it, but forked from one interpreter that imported
    ``preload`` (and ``attnviz.cli``) first: the half second of imports a fresh interpreter pays for every command
    is paid once.  ``(argv, cwd, Alone(...))``: that command's own memory cap and variables.  A run past ``bound_s``
    is killed, its code None (:func:`bounded` fails the test reading it).  ``prelude``: code the forking interpreter
    runs once before the commands (its names are the commands' script's, as a ``python -c`` script's).
    ``with_stdout``: (exit code, stderr, stdout) each.  Where ``fork`` is not Linux's, each runs in :func:`run_cli`
    (neither of those two then)."""
    import json
    import tempfile

    cases = tuple((*case, Alone()) if len(case) == 2 else case for case in cases)
    if sys.platform != "linux":
        return [
            run_cli(*argv, cwd=cwd, bound_s=bound_s, memory_gb=alone.memory_gb, env={**(env or {}), **alone.env})
            for argv, cwd, alone in cases
        ]
    env = dict(os.environ, **(env or {}))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory(prefix="attnviz-cli-forked-") as tmp:
        errs = [Path(tmp) / f"{i}.err" for i in range(len(cases))]
        spec = [
            [
                list(map(str, argv)),
                str(cwd),
                str(Path(tmp) / f"{i}.out"),
                str(err),
                None if alone.memory_gb is None else int(alone.memory_gb * 2**30),
                alone.env,
                alone.leave,
            ]
            for i, ((argv, cwd, alone), err) in enumerate(zip(cases, errs))
        ]
        (Path(tmp) / "cases.json").write_text(json.dumps([spec, list(preload), bound_s, prelude]))
        try:
            done = subprocess.run(
                [sys.executable, "-c", _FORKED, str(Path(tmp) / "cases.json")],
                env=env,
                capture_output=True,
                text=True,
                timeout=BOUND_S + bound_s * len(cases),  # (each command is bounded in there: this is a backstop)
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"{len(cases)} forked attnviz commands still ran after {BOUND_S + bound_s * len(cases)} s")
        assert done.returncode == 0, f"the interpreter forking {len(cases)} commands ended {done.returncode}: {done}"
        codes = json.loads(done.stdout.strip().splitlines()[-1])
        if with_stdout:
            return [
                (code, err.read_text(), Path(out).read_text()) for code, err, (_, _, out, *_) in zip(codes, errs, spec)
            ]
        return [(code, err.read_text()) for code, err in zip(codes, errs)]


def bounded(result: tuple[int | None, str]) -> tuple[int, str]:
    """One command's ``(exit code, stderr)`` from :func:`run_cli_forked`; one that ran past its bound fails the test
    that reads it (the others sharing the interpreter stand on their own)."""
    code, err = result
    if code is None:
        pytest.fail(f"the command still ran after its bound (killed); its stderr: {err[-2000:]}")
    return code, err


def refused_in_one_line(capsys, args, *words, unwritten: Path) -> None:
    """``attnviz ARGS`` in this process exits 2 with one line on stderr holding every one of ``words``, and
    ``unwritten`` (its output) is still not there."""
    from attnviz.cli import main

    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and all(w in err[0] for w in words), err
    assert not unwritten.exists()


def refuse_unusable_clips(refused, model: Path, out: Path, folder: Path) -> None:
    """The clips no speech model can hear, each refused in one line by ``refused(args, *words)``: a silent one
    and a file that is no sound file (written into ``folder``), and a text given instead of audio."""
    import numpy as np
    import soundfile as sf

    silent = folder / "silent.flac"
    sf.write(silent, np.zeros(16000, np.float32), 16000)
    refused(["extract", str(model), "--audio", str(silent), "--out", str(out)], "silent.flac", "silent")
    junk = folder / "junk.wav"
    junk.write_bytes(b"RIFF but not really a wave file" * 10)
    refused(["extract", str(model), "--audio", str(junk), "--out", str(out)], "junk.wav", "not a readable sound file")
    refused(["extract", str(model), "--text", "w1 w2", "--out", str(out)], "takes audio", "--audio FILE")
