"""Where the statistics graph's ranking nodes run (session 25, host25: runtime/statgraph.py _rank_nodes, RANKS) and
whether a CUDA session ranks as the CPU one does: the ranking nodes alone in a graph (SUMS and OFF in, RANKS out),
run on ``--provider`` with onnxruntime's profiling, each node's provider listed (a node onnxruntime placed on the
CPU in a CUDA session costs a copy each way), then RANKS compared with a CPU session's on MiniLM-sized batches
(72 heads, 11 statistics, B = 32) with ties, -0.0, NaN and items with no counted row: every row's settled count
and its settled columns must agree (the unsettled rows' order is TopK's own and may differ; the host ranks those).
Also the ranking's time a batch on the device (median of ``--runs``).

    python3 bench/gpu/rank_nodes_check.py --provider cuda
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from attnviz.core.stats import ROW_STATS
from attnviz.runtime import statfeeds as sf
from attnviz.runtime import statgraph as sg

S = len(ROW_STATS)


def graph_bytes(opset: int) -> bytes:
    graph = helper.make_graph(
        [],
        "ranks",
        [
            helper.make_tensor_value_info(sf.SUMS, TensorProto.DOUBLE, ["B", "H", S]),
            helper.make_tensor_value_info(sf.OFF, TensorProto.FLOAT, ["B", 1, S, "T"]),
        ],
        [],
    )
    sg._rank_nodes(sg._Nodes(graph, "rank_"), graph, opset)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m.SerializeToString()


def session(model: bytes, provider: str, profile: str = "") -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if profile:
        so.enable_profiling, so.profile_file_prefix = True, profile
    prov = ["CUDAExecutionProvider", "CPUExecutionProvider"] if provider == "cuda" else ["CPUExecutionProvider"]
    return ort.InferenceSession(model, so, providers=prov)


def batch(rng, b: int = 32, nh: int = 72, t: int = 40) -> dict[str, np.ndarray]:
    sums = rng.standard_normal((b, nh, S))
    sums[:, ::7] = np.round(sums[:, ::7] * 2) / 2  # ties
    sums[rng.random(sums.shape) < 0.01] = -0.0
    sums[rng.random(sums.shape) < 0.01] = 0.0
    sums[rng.random(sums.shape) < 0.002] = np.nan
    off = np.where(rng.random((b, 1, S, t)) < 0.8, 0.0, -np.inf).astype(np.float32)
    off[rng.integers(0, b, 2)] = -np.inf  # items with no counted row
    return {sf.SUMS: sums, sf.OFF: off}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--provider", default="cuda", choices=("cpu", "cuda"))
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--opset", type=int, default=17)
    a = ap.parse_args()
    model = graph_bytes(a.opset)
    dev = session(model, a.provider, "/tmp/rank_nodes")
    cpu = session(model, "cpu")
    rng = np.random.default_rng(0)
    feeds = [batch(rng) for _ in range(8)]
    for f in feeds:
        dev.run([sf.RANKS], f)
    prof = json.loads(Path(dev.end_profiling()).read_text())
    placed = {}
    for e in prof:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            placed[e["name"][: -len("_kernel_time")]] = (e["args"].get("op_name"), e["args"].get("provider"))
    print("ranking nodes by provider:", dict(collections.Counter(p for _, p in placed.values())))
    for name, (op, prov) in sorted(placed.items()):
        if prov != "CUDAExecutionProvider":
            print(f"  {name} {op} on {prov}")
    dev = session(model, a.provider)
    agree = rows = settled = 0
    for f in feeds:
        got, want = dev.run([sf.RANKS], f)[0], cpu.run([sf.RANKS], f)[0]
        same_lead = got[:, -1] == want[:, -1]
        rows += len(got)
        for r in np.flatnonzero(same_lead):
            d = max(int(got[r, -1]) - 1, 0)
            agree += bool(np.array_equal(got[r, :d], want[r, :d]))
        settled += int((got[:, -1] > 5).sum())
    print(f"rows {rows}: settled count and settled columns the CPU's in {agree}; settled for k = 5: {settled}")
    took = []
    for i in range(a.runs):
        t0 = time.perf_counter()
        dev.run([sf.RANKS], feeds[i % len(feeds)])
        took.append(time.perf_counter() - t0)
    print(f"ranking alone on {a.provider}: {1e3 * statistics.median(took):.3f} ms a batch (median of {a.runs})")


if __name__ == "__main__":
    main()
