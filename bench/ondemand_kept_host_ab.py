"""The host time of an isolated on-demand run whose Q/Kᵀ stay in the child (``ATTNVIZ_QK_DEVICE=on`` on a CPU runs
the CUDA path's code with CPU OrtValues): two attnviz trees, A and B, in alternating child processes over one
exported MiniLM (issue 26, session 23 odiso23).  Per tree: medians of the ``ATTNVIZ_TRACE=1`` phases and of the
host part (the whole run less onnxruntime's), and the CPU of the parent and of the child per run (the child's from
/proc/PID/schedstat, onnxruntime's run included).

    OMP_NUM_THREADS=1 python bench/ondemand_kept_host_ab.py --a /tmp/old --b . --tokens 256 --rounds 6 --runs 40
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def one(model: str, tokens: int, runs: int, pause: float = 0.0) -> dict:
    """In a child process whose PYTHONPATH is one tree: ``runs`` traced on-demand runs, phases in ms."""
    os.environ["ATTNVIZ_TRACE"] = "1"
    sys.path.insert(0, str(ROOT))
    import gc

    import numpy as np

    import attnviz.runtime.host as host
    from attnviz.runtime import open_model
    from attnviz.runtime.host import take_trace

    ids = np.full((1, tokens), 7, np.int64)
    f = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    m = open_model(model, provider="cpu", threads=1)
    for _ in range(3):
        r = m.run(f, mode="ondemand")
        kind = type(r.maps[0]).__name__
        del r
    take_trace()
    pid = host._host.proc.pid

    def child_cpu() -> float:  # the scheduler's run time of the child, in ns (/proc/PID/stat's ticks are 10 ms)
        return int(open(f"/proc/{pid}/schedstat").read().split()[0]) / 1e9

    walls = []
    gc.disable()  # a collection landing in one tree's runs and not the other's is not what is compared
    c0, k0 = time.process_time(), child_cpu()
    for _ in range(runs):
        if pause:  # --pause: the child's work after its reply (bookkeeping) done before the next request
            time.sleep(pause)
        t0 = time.perf_counter()
        r = m.run(f, mode="ondemand")
        walls.append(time.perf_counter() - t0)
        del r
    cpu, kcpu = time.process_time() - c0, child_cpu() - k0
    gc.enable()
    parent, child = take_trace()
    ph = {
        "parent: call -> sent": [p[1] - p[0] for p in parent],
        "sent -> child received": [c[0] - p[1] for p, c in zip(parent, child)],
        "child: received -> ort": [c[1] - c[0] for c in child],
        "child: ort run": [c[2] - c[1] for c in child],
        "child: ort -> reply ready": [c[3] - c[2] for c in child],
        "reply ready -> parent received": [p[2] - c[3] for p, c in zip(parent, child)],
        "parent: received -> returned": [p[3] - p[2] for p in parent],
        "call host part (call less ort)": [(p[3] - p[0]) - (c[2] - c[1]) for p, c in zip(parent, child)],
        "m.run host part (m.run less ort)": [w - (c[2] - c[1]) for w, c in zip(walls, child)],
        "m.run": walls,
    }
    out = {k: 1000 * statistics.median(v) for k, v in ph.items()}
    out["parent CPU / run"] = 1000 * cpu / runs
    out["child CPU / run"] = 1000 * kcpu / runs
    out["kind"] = kind
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", help="tree A (the old code: git archive main attnviz | tar -x -C DIR)")
    ap.add_argument("--b", default=str(ROOT.parent), help="tree B (default: this checkout)")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--pause", type=float, default=0.0, help="seconds between runs, outside the times (default 0)")
    ap.add_argument("--model", help="an exported MiniLM (default: exported here once)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one, a.tokens, a.runs, a.pause)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        model = a.model
        if model is None:
            from engine_bench import export_minilm

            model = str(export_minilm(Path(tmp), max(512, a.tokens)))
        got: dict[str, list[dict]] = {"A": [], "B": []}
        for _ in range(a.rounds):
            for tag, tree in (("A", a.a), ("B", a.b)):
                env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()), ATTNVIZ_QK_DEVICE="on")
                cmd = [sys.executable, __file__, "--one", model, "--tokens", str(a.tokens), "--runs", str(a.runs)]
                cmd += ["--pause", str(a.pause)]
                res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                got[tag].append(json.loads(res.stdout.strip().splitlines()[-1]))
    load = os.getloadavg()
    print(
        f"{a.tokens} tokens, {got['B'][0]['kind']}, {a.rounds} rounds x {a.runs} runs, pause {a.pause} s; load {load}"
    )
    print("| phase (median of round medians, ms) | A | B | B/A |\n|---|---:|---:|---:|")
    for k in got["A"][0]:
        if k == "kind":
            continue
        va = statistics.median(r[k] for r in got["A"])
        vb = statistics.median(r[k] for r in got["B"])
        print(f"| {k} | {va:.3f} | {vb:.3f} | {vb / va if va else float('nan'):.3f} |")


if __name__ == "__main__":
    main()
