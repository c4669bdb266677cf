"""On-demand maps at long inputs against plain onnxruntime (issue 26 item 3: ≤ 1.05× at 4,096 tokens).

    python bench/ondemand_bench.py [--lengths 2048 4096] [--rounds 5] [--provider cpu|cuda] [--qk auto|both]

Model: all-MiniLM-L6-v2 with its position table tiled to the longest length (bench/engine_bench.export_minilm).
Rows, interleaved round by round (order alternating), one thread each:
  plain        onnxruntime.InferenceSession(path).run(None, feeds) in this process -- the baseline
  attnviz      AttentionModel.run(feeds, mode="ondemand"), as shipped: the session in the crash-isolation child
  in-process   the same with ATTNVIZ_INPROCESS=1 (a corpus worker's layout)
--qk both: each attnviz row twice, Q and Kᵀ brought to the host (ATTNVIZ_QK_DEVICE=off, the CPU default) and left
on the session's device (=on; runtime/kept.py), rows "attnviz qk-host", "attnviz qk-dev", ...
Wall time, and CPU time of this process and its children (the isolation child's included, read from /proc).
pinned: on CUDA, whether the output slots were page-locked (``yes``) or why not (runtime/pinning.py;
ATTNVIZ_PIN=off in the environment turns it off); "-" where it does not apply (plain, CPU).
On-demand keeps each site's Q and Kᵀ (and the mask) and recomputes a head's rows when one is drawn; a run itself
should cost what plain inference costs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

CHILD = r"""
import os, sys, time, json
sys.path.insert(0, sys.argv[1])
mode, path, t, rounds, provider = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
if mode.startswith("in-process"):
    os.environ["ATTNVIZ_INPROCESS"] = "1"
from engine_bench import feeds
f = feeds(t)
if mode == "plain":
    import onnxruntime as ort
    so = ort.SessionOptions(); so.intra_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    prov = ["CPUExecutionProvider"]
    if provider == "cuda":  # what attnviz asks for on CUDA too: exact float32 (no TF32)
        prov.insert(0, ("CUDAExecutionProvider", {"use_tf32": "0"}))
    s = ort.InferenceSession(path, so, providers=prov)
    run = lambda: s.run(None, f)
else:
    from attnviz.runtime import open_model
    m = open_model(path, provider=provider, threads=1)
    run = lambda: m.run(f, mode="ondemand")
warm = run()  # warm: the session, the arena, the slots
# on CUDA: whether the output slots are page-locked, or why not (runtime/pinning.py); plain has no such thing
pinned = getattr(warm, "info", {}).get("pinned", "-")
# KeptMap: Q and Kᵀ left on the session's device (runtime/kept.py); RecomputeMap: brought to the host
kind = type(warm.maps[0]).__name__ if hasattr(warm, "maps") else "-"
del warm
def cpu():
    import resource
    from proc_cpu import children_cpu_s
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    # the isolation child is still running: its time is in /proc, not in RUSAGE_CHILDREN yet
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime + children_cpu_s()
out = []
for _ in range(rounds):
    c = cpu()  # (a scan of /proc: before the clock starts, not inside the run's wall)
    w = time.perf_counter()
    r = run(); del r
    out.append((time.perf_counter() - w, cpu() - c))
print(json.dumps([out, pinned, kind]))
"""


QK_ROWS = {"qk-host": "off", "qk-dev": "on"}  # --qk both: ATTNVIZ_QK_DEVICE per twin row (runtime/kept.py)


def measure(mode: str, model: Path, t: int, rounds: int, provider: str) -> tuple[list[tuple[float, float]], str, str]:
    import json

    qk = QK_ROWS.get(mode.rsplit(" ", 1)[-1])
    env = {
        **{k: v for k, v in os.environ.items() if k != "ATTNVIZ_QK_DEVICE"},
        **({"ATTNVIZ_QK_DEVICE": qk} if qk else {}),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "OMP_NUM_THREADS": "1",
    }
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(ROOT / "bench"), mode, str(model), str(t), str(rounds), provider],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    out, pinned, kind = json.loads(r.stdout.strip().splitlines()[-1])
    return [tuple(x) for x in out], pinned, kind


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (each: every row, --runs runs)")
    # a fresh process a row and round costs a CUDA start-up (~5 s on an H100: 6 rounds overran 90 s in session 19)
    # while a run at 4,096 takes ~40 ms there: more runs a process buy samples without more start-ups
    ap.add_argument("--runs", type=int, default=2, help="warm runs measured in each row's process (default 2)")
    ap.add_argument("--provider", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument(
        "--qk", default="auto", choices=["auto", "both"], help="both: each attnviz row with Q/Kᵀ on the host and kept"
    )
    a = ap.parse_args()
    names = ["plain", "attnviz", "in-process"]
    if a.qk == "both":
        names = ["plain", *(f"{n} {q}" for n in names[1:] for q in QK_ROWS)]
    from engine_bench import export_minilm

    with tempfile.TemporaryDirectory() as tmp:
        model = export_minilm(Path(tmp), max(a.lengths))
        print(
            f"provider {a.provider}; {a.rounds} rounds × {a.runs} runs a row; load average at start: {os.getloadavg()[0]:.1f}"
        )
        print(
            f"{'tokens':>6} | {'row':<18} | {'wall median':>12} | {'CPU median':>11} | wall vs plain | CPU vs plain"
            " | pinned | maps"
        )
        for t in a.lengths:
            rows: dict[str, list] = {n: [] for n in names}
            pinned: dict[str, set[str]] = {mode: set() for mode in rows}
            kinds: dict[str, set[str]] = {mode: set() for mode in rows}
            for r in range(a.rounds):
                order = list(rows) if r % 2 == 0 else list(reversed(rows))
                for mode in order:
                    got, pin, kind = measure(mode, model, t, a.runs, a.provider)
                    rows[mode] += got
                    pinned[mode].add(pin)
                    kinds[mode].add(kind)
            base_w = statistics.median(x[0] for x in rows["plain"])
            base_c = statistics.median(x[1] for x in rows["plain"])
            for mode, xs in rows.items():
                w = statistics.median(x[0] for x in xs)
                c = statistics.median(x[1] for x in xs)
                pin = " / ".join(sorted(pinned[mode]))
                print(
                    f"{t:>6} | {mode:<18} | {1000 * w:>9.2f} ms | {1000 * c:>8.2f} ms | {w / base_w:>12.3f}× | {c / base_c:>11.3f}×"
                    f" | {pin} | {' / '.join(sorted(kinds[mode]))}"
                )
        print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
