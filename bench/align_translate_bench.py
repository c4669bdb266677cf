"""Speed of ``attnviz align`` on the first 50 held-out NT verses of the shipped translation demo (session 22, align22):
teacher-forced on the gold English (``--tgt``), and the model's own translations, greedy and best of ``--beams 4``.
Interleaved rounds, each run a fresh process with OMP_NUM_THREADS=1 (CPU = that child's user + system time).
Needs bible-alignments (``pip install --no-deps bible-alignments``).  From the repository root:
``python bench/align_translate_bench.py [--lines 50] [--rounds 2]``."""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODES = {"teacher-forced (--tgt, the gold English)": "tgt", "greedy": [], "beams 4": ["--beams", "4"]}


def _run(argv: list[str], env: dict) -> tuple[float, float]:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    from attnviz.training import data_translation as dt

    tmp = Path(tempfile.mkdtemp(prefix="align-bench-"))
    src, tgt, _ = dt.write_pharaoh_files(dt.split_pairs(dt.load_bible()).test[: a.lines], tmp / "nt")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.getcwd())
    base = [sys.executable, "-m", "attnviz", "align", "models/translation.onnx", "--src", str(src), "--no-progress"]
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in MODES}
    print("uptime before:", os.popen("uptime").read().strip())
    for _ in range(a.rounds):
        for name, extra in MODES.items():
            flags = ["--tgt", str(tgt)] if extra == "tgt" else list(extra)
            times[name].append(_run([*base, *flags, "--out", str(tmp / "a.txt"), "--provider", "cpu"], env))
    print("uptime after:", os.popen("uptime").read().strip())
    for name, runs in times.items():
        print(name, "; ".join(f"{w:.1f} s wall / {c:.1f} s CPU = {a.lines / w:.2f} lines/s" for w, c in runs))


if __name__ == "__main__":
    main()
