"""A Ctrl-C that the kernel hands to a thread other than the main one, against a CLI command: the command runs
(``python -m attnviz ARGS``, this checkout's package or ``--package-dir``'s), and once it has ``--min-threads``
threads and its main thread sleeps in ``--main-wchan`` (after ``--after`` seconds) one of its threads gets SIGINT
through ``tgkill``: ``--target newest`` (the thread started last: a pool's), ``other`` (the first that is not the
main one), ``main``, or a substring of a thread's name.  Reported: the threads at the signal (name, state, where
the kernel has them sleeping), the process's own CPU seconds from the signal to its exit (read from /proc while
it is a zombie), the wall time, the exit code and the load average.  Linux only.

    python bench/ctrl_c_other_thread.py --after 3 --min-threads 4 --main-wchan futex --target newest -- \\
        figure MODEL --text-file LONG.txt --view overview --keep 0.9 --out /tmp/f.png --provider cpu

(session 29's numbers: notes in the commits that cite this script.)"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from proc_cpu import _stat, ticks_cpu_s

REPO = Path(__file__).resolve().parents[1]
SYS_TGKILL = {"x86_64": 234, "aarch64": 131}


def threads(pid: int) -> dict[int, tuple[str, str, str]]:
    """Each thread of ``pid``: (name, state, kernel wait channel)."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            base = f"/proc/{pid}/task/{tid}"
            name = Path(f"{base}/comm").read_text().strip()
            wchan = Path(f"{base}/wchan").read_text().strip()
            state = Path(f"{base}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        out[int(tid)] = (name, state, wchan)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--after", type=float, default=3.0, help="seconds before the signal may be sent")
    ap.add_argument("--target", default="other", help="newest | other | main | a thread name's substring")
    ap.add_argument("--min-threads", type=int, default=0)
    ap.add_argument("--main-wchan", default="", help="a substring of the main thread's wait channel (e.g. futex)")
    ap.add_argument("--package-dir", default=str(REPO), help="the folder holding the attnviz package to run")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    env = dict(os.environ, PYTHONPATH=a.package_dir)
    t0 = time.monotonic()
    p = subprocess.Popen(
        [sys.executable, "-m", "attnviz", *args],
        cwd=a.package_dir,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )

    def pick(ts: dict[int, tuple[str, str, str]]) -> int | None:
        if time.monotonic() - t0 < a.after or len(ts) < a.min_threads:
            return None
        if a.main_wchan not in ts.get(p.pid, ("", "", ""))[2]:
            return None
        others = [t for t in sorted(ts) if t != p.pid]
        if a.target == "main":
            return p.pid
        if a.target == "newest":
            return others[-1] if others else None
        return next((t for t in others if a.target == "other" or a.target in ts[t][0]), None)

    tid = None
    while p.poll() is None and tid is None:
        ts = threads(p.pid)
        tid = pick(ts)
        time.sleep(0.005)  # polling interval
    if tid is None:
        print(f"exited ({p.returncode}) before the signal: {p.communicate()[1][-500:]}")
        return 1
    for t, v in sorted(ts.items()):
        print(f"  {t}{' (main)' if t == p.pid else ''}: {v}")
    cpu0 = ticks_cpu_s(p.pid)
    signalled = time.monotonic()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall(SYS_TGKILL[os.uname().machine], p.pid, tid, signal.SIGINT)
    cpu1 = cpu0
    while (st := _stat(p.pid)) is not None:  # until a zombie, whose CPU is still readable
        cpu1 = ticks_cpu_s(p.pid)
        if st[0] == "Z":
            break
        time.sleep(0.005)  # polling interval
    exited = time.monotonic() - signalled
    err = p.communicate()[1]
    print(f"SIGINT to {tid} {ts[tid]}: exit {p.returncode}, {cpu1 - cpu0:.2f} s CPU after the signal, {exited:.2f} s")
    print(f"  (ran {signalled - t0:.1f} s before it; load {os.getloadavg()[0]:.1f}); stderr: {err.strip()[-300:]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
