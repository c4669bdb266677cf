"""``attnviz`` run as a user runs it, in a fresh interpreter, bounded in time (hostile-input tests)."""

from __future__ import annotations

import os
import subprocess
import sys
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
