"""Where an isolated on-demand run's time goes beside onnxruntime's own (issue 26: on-demand at 4,096 tokens on
CUDA was 1.09x plain isolated, 1.006x in-process, session 23): ``ATTNVIZ_TRACE=1`` stamps of the parent (called,
request sent, reply received, returned) and the child (request received, onnxruntime started, onnxruntime done,
reply ready), medians over ``--runs`` runs, and the CPU seconds of this process and of the child per run.

    python bench/gpu/ondemand_trace.py --provider cuda --tokens 4096 --runs 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ["ATTNVIZ_TRACE"] = "1"
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))


def child_cpu() -> float:
    """CPU seconds of this process's children still running (the isolation child), from /proc."""
    total = 0.0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                st = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(st[1]) == os.getpid():
                total += (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--provider", default="cuda", choices=("cpu", "cuda"))
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--runs", type=int, default=20)
    a = ap.parse_args()
    from engine_bench import export_minilm, feeds

    from attnviz.runtime import open_model
    from attnviz.runtime.host import take_trace

    with tempfile.TemporaryDirectory() as tmp:
        path = export_minilm(Path(tmp), a.tokens)
        f = feeds(a.tokens)
        m = open_model(str(path), provider=a.provider, threads=1)
        for _ in range(3):
            r = m.run(f, mode="ondemand")
            kind = type(r.maps[0]).__name__
            del r
        take_trace()
        walls, mine, theirs = [], [], []
        for _ in range(a.runs):
            k0 = child_cpu()  # (a scan of /proc: before the clock starts, not inside the run's wall)
            t0, c0 = time.perf_counter(), time.process_time()
            r = m.run(f, mode="ondemand")
            walls.append(time.perf_counter() - t0)
            mine.append(time.process_time() - c0)
            theirs.append(child_cpu() - k0)
            del r
        parent, child = take_trace()
    rows = {
        "parent: called -> request sent": [p[1] - p[0] for p in parent],
        "request sent -> child received": [c[0] - p[1] for p, c in zip(parent, child)],
        "child: received -> onnxruntime": [c[1] - c[0] for c in child],
        "child: onnxruntime run": [c[2] - c[1] for c in child],
        "child: onnxruntime -> reply ready": [c[3] - c[2] for c in child],
        "reply ready -> parent received": [p[2] - c[3] for p, c in zip(parent, child)],
        "parent: received -> returned": [p[3] - p[2] for p in parent],
        "whole run (m.run)": walls,
        "CPU of this process": mine,
        "CPU of the child (10 ms ticks)": theirs,
    }
    print(f"{a.tokens} tokens, {a.provider}, {kind}; {len(parent)} runs traced; load {os.getloadavg()[0]:.1f}")
    print("| phase | median ms | min ms |\n|---|---:|---:|")
    for k, v in rows.items():
        print(f"| {k} | {1000 * statistics.median(v):.3f} | {1000 * min(v):.3f} |")


if __name__ == "__main__":
    main()
