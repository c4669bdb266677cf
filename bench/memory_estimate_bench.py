"""How close the memory estimate made before a run (runtime/memory.py) is to the memory the run really takes.

    python bench/memory_estimate_bench.py [--lengths 512 1024 2048 4096] [--mode dense|ondemand] [--model M.onnx]

Model: all-MiniLM-L6-v2 with its position table stretched to 4,096 (bench/engine_bench.py export_minilm), or
``--model`` (inputs [batch, tokens] int64).

Every row is a fresh process running the model in-process (``ATTNVIZ_INPROCESS=1``): measured =
the process's peak resident memory (VmHWM) during one run minus its resident memory just before it (after a
warm-up run at 8 tokens, which loads the weights and the libraries); estimate = the run's estimate minus the
weights (already resident).  The estimate is what ``attnviz`` compares with ``--max-memory``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _vm(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def one(model: str, length: int, mode: str) -> dict:
    import numpy as np

    from attnviz.runtime import memory
    from attnviz.runtime.model import open_model

    m = open_model(model, provider="cpu", threads=1)
    names = [i.name for i in m.inputs]

    def feeds(t: int) -> dict:
        return {n: np.ones((1, t), np.int64) for n in names}

    m.run(feeds(8), mode=mode)
    sess = m._session(mode)[0]
    fetch = m._fetch_list(mode, m._session(mode)[1])
    f = m.check_feeds(feeds(length))
    plan = sess.memory._plan  # the session's own plan (built by the warm-up run)
    assert isinstance(plan, memory.MemoryPlan)
    shapes = {k: (tuple(v.shape), 7) for k, v in f.items()}
    est = plan.estimate(shapes, fetch)
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current resident size
    before = _vm("VmRSS")
    r = m.run(f, mode=mode)
    peak = _vm("VmHWM")
    del r
    return {
        "length": length,
        "mode": mode,
        "estimate_mb": (est.bytes - est.weights) / 1e6,
        "measured_mb": (peak - before) / 1e6,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="default: MiniLM-L6 exported with 4,096 positions to a temp folder")
    ap.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 2048, 4096])
    ap.add_argument("--mode", default="dense")
    ap.add_argument("--one", type=int)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.model, a.one, a.mode)))
        return
    if not a.model:
        import tempfile

        sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests")]
        from engine_bench import export_minilm

        a.model = str(export_minilm(Path(tempfile.mkdtemp(prefix="attnviz-memest-")), max_pos=max(4096, *a.lengths)))
    env = dict(os.environ, ATTNVIZ_INPROCESS="1", PYTHONPATH=str(ROOT))
    print(f"{'tokens':>7} {'mode':>8} {'estimate MB':>12} {'measured MB':>12} {'ratio':>6}")
    for t in a.lengths:
        out = subprocess.run(
            [sys.executable, __file__, "--model", a.model, "--one", str(t), "--mode", a.mode],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        r = json.loads(out.strip().splitlines()[-1])
        ratio = r["estimate_mb"] / r["measured_mb"] if r["measured_mb"] > 0 else float("nan")
        print(f"{t:>7} {r['mode']:>8} {r['estimate_mb']:>12.1f} {r['measured_mb']:>12.1f} {ratio:>6.2f}")


if __name__ == "__main__":
    main()
