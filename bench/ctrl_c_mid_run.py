"""A Ctrl-C in the middle of a corpus run (big batches in flight): the time from the signal to the command's exit,
old code against new, rounds interleaved.

    OMP_NUM_THREADS=1 python bench/ctrl_c_mid_run.py --old DIR [--kinds corpus threads ablate compare] [--rounds 3]

``--old``: a folder holding the old ``attnviz`` package (e.g. ``git archive BASE attnviz | tar -x -C DIR``); the
new one is this checkout's.  The model and corpus are tests/test_hostile_orphans.py's ``_slow_corpus``: a d=1024
two-layer encoder, 256 short items (the first batch: the run's first checkpoint) then 512 long ones (two batches
of ~1.5 G multiply-adds an item).  Each run gets SIGINT to its process group (as a terminal sends it) once its
checkpoint exists; reported: exit code, seconds to the exit and until every descendant (workers, resource tracker)
is gone, whether stderr held a traceback, and the load average at the signal."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

KINDS = {  # the command's arguments before the shared ones, and its environment
    "corpus": (["corpus", "{m}"], {}),
    "threads": (["corpus", "{m}"], {"ATTNVIZ_CORPUS_LAYOUT": "threads", "ATTNVIZ_CORPUS_CHUNK": "1"}),
    "ablate": (["ablate", "{m}", "--heads", "encoder self 0:1"], {}),
    "compare": (["compare", "{m}", "{m}"], {}),
    "ray": (["corpus", "{m}", "--engine", "ray"], {}),
}


def _alive(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


RAY_WORK_S = 3.0  # after Ray's first task process is up: the cluster started, the batches in flight


def _ray_worker(c: psutil.Process) -> bool:
    try:
        return c.name().startswith("ray::")
    except psutil.Error:
        return False


def one(code: str, argv: list[str], env: dict, out: Path) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    p = subprocess.Popen(
        [sys.executable, "-m", "attnviz.cli", *argv, "--out", str(out)],
        env=dict(env, PYTHONPATH=code),
        cwd=out.parent,  # not the checkout: `python -m` puts the working directory ahead of PYTHONPATH
        start_new_session=True,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: dict[int, psutil.Process] = {}
    ray_after: float | None = None
    while p.poll() is None:
        for c in psutil.Process(p.pid).children(recursive=True):
            seen.setdefault(c.pid, c)
        if (out / "checkpoint.npz").exists():
            break
        if ray_after is None and any(_ray_worker(c) for c in seen.values()):
            ray_after = time.monotonic() + RAY_WORK_S
        if ray_after is not None and time.monotonic() > ray_after:  # Ray's engine keeps no per-batch checkpoint
            break
        time.sleep(0.02)  # polling interval
    load = os.getloadavg()[0]
    t = time.monotonic()
    os.killpg(p.pid, signal.SIGINT)
    err = p.communicate(timeout=600)[1]
    exit_s = time.monotonic() - t
    while any(_alive(c) for c in seen.values()) and time.monotonic() - t < 60:
        time.sleep(0.02)
    return {
        "rc": p.returncode,
        "exit_s": round(exit_s, 2),
        "all_gone_s": round(time.monotonic() - t, 2),
        "left": [c.pid for c in seen.values() if _alive(c)],
        "descendants": len(seen),
        "traceback": "Traceback" in err,
        "load": round(load, 1),
        "left_in_out": sorted(f.name for f in out.iterdir()) if out.is_dir() else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--kinds", nargs="+", default=list(KINDS))
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    from test_hostile_orphans import _slow_corpus

    with tempfile.TemporaryDirectory() as tmp:
        shared = _slow_corpus(Path(tmp))
        model, rest = shared[1], shared[2:]
        for kind in a.kinds:
            head, extra = KINDS[kind]
            argv = [x.format(m=model) for x in head] + rest
            env = dict(os.environ, OMP_NUM_THREADS="1", **extra)
            for r in range(a.rounds):
                for name, code in (("old", a.old), ("new", str(REPO))):
                    row = one(code, argv, env, Path(tmp) / f"{kind}-{name}")
                    print(json.dumps({"kind": kind, "round": r, "code": name, **row}), flush=True)


if __name__ == "__main__":
    main()
