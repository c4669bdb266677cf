"""Does making the CUDA context on a thread at a process's start (attnviz/runtime/cuda_warm.py) shorten the way to its
first CUDA session?  Fresh processes, interleaved: each imports what a corpus worker imports (numpy, the run's
reduction modules, onnxruntime), then makes a CUDA session of the MiniLM export, with or without ``cuda_warm.start()``
as its first act.  Printed: per variant, the median seconds from the interpreter's start to the session made, and
the session's own making.

    python bench/gpu/cuda_warm_check.py --model /tmp/attnviz_corpus_bench/minilm.onnx --rounds 7
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
if sys.argv[2] == "warm":
    from attnviz.runtime import cuda_warm
    cuda_warm.start()
import numpy
import attnviz.corpus.reduce, attnviz.runtime.light_model
import onnxruntime as ort
t1 = time.perf_counter()
ort.preload_dlls()
so = ort.SessionOptions()
s = ort.InferenceSession(sys.argv[1], so, providers=[("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"])
t2 = time.perf_counter()
print(json.dumps({"imports": t1 - t0, "session": t2 - t1, "to_session": t2 - t0, "provider": s.get_providers()[0]}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    root = Path(__file__).resolve().parents[2]
    rows: dict[str, list[dict]] = {"cold": [], "warm": []}
    for r in range(a.rounds + 1):
        for v in list(rows) if r % 2 == 0 else list(reversed(rows)):
            p = subprocess.run([sys.executable, "-c", CHILD, a.model, v], capture_output=True, text=True, cwd=root)
            if p.returncode != 0:
                raise SystemExit(p.stderr[-2000:])
            if r:  # the first round: not measured (file caches)
                rows[v].append(json.loads(p.stdout.strip().splitlines()[-1]))
    print("| variant | imports s | session s | interpreter start → session s | provider |")
    print("|---|---:|---:|---:|---|")
    for v, rs in rows.items():
        med = {k: statistics.median(x[k] for x in rs) for k in ("imports", "session", "to_session")}
        print(f"| {v} | {med['imports']:.3f} | {med['session']:.3f} | {med['to_session']:.3f} | {rs[-1]['provider']} |")


if __name__ == "__main__":
    main()
