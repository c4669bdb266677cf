"""Where on-demand's run loses to plain at 4,096 tokens on CUDA (issue 26: 1.19x on an H100 in session 23), in one
process, rows interleaved: plain's session, the on-demand graph (Q and Kᵀ of every site exposed) run raw with
everything to the host and with Q/Kᵀ bound to the device (what runtime/kept.py asks for), and attnviz's own run
(in-process): the graph's cost apart from attnviz's host work.  Also each graph's optimised node count.

    python bench/gpu/ondemand_split.py --provider cuda --tokens 4096 --rounds 5 --runs 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ["ATTNVIZ_INPROCESS"] = "1"
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))


def session(data, provider: str, optimized: str | None = None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.log_severity_level = 3
    if optimized:
        so.optimized_model_filepath = optimized
    prov = ["CPUExecutionProvider"]
    if provider == "cuda":
        prov.insert(0, ("CUDAExecutionProvider", {"use_tf32": "0"}))
    return ort.InferenceSession(data, so, providers=prov)


def nodes(path: str) -> str:
    import collections

    import onnx

    m = onnx.load(path, load_external_data=False)
    c = collections.Counter(n.op_type for n in m.graph.node)
    return f"{len(m.graph.node)} nodes: " + ", ".join(f"{k} {v}" for k, v in c.most_common(12))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--provider", default="cuda", choices=("cpu", "cuda"))
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=10)
    a = ap.parse_args()
    from engine_bench import export_minilm, feeds

    from attnviz.runtime import graph as ins
    from attnviz.runtime import open_model

    dev = "cuda" if a.provider == "cuda" else "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        path = export_minilm(Path(tmp), a.tokens)
        f = feeds(a.tokens)
        m = open_model(str(path), provider=a.provider, threads=1)
        data, exposed = ins.instrumented_bytes(m.graph, m.graph_sites, "ondemand")
        od_path = Path(tmp) / "ondemand.onnx"
        od_path.write_bytes(data)
        plain = session(str(path), a.provider, str(Path(tmp) / "plain_opt.onnx"))
        od = session(str(od_path), a.provider, str(Path(tmp) / "od_opt.onnx"))
        print("plain optimised:", nodes(str(Path(tmp) / "plain_opt.onnx")))
        print("on-demand optimised:", nodes(str(Path(tmp) / "od_opt.onnx")))
        outs = [o.name for o in od.get_outputs()]
        model_outs = [o.name for o in plain.get_outputs()]
        print(f"on-demand outputs: {len(outs)} ({len(model_outs)} the model's)")

        def bound(sess, to_dev: set[str]):
            def go():
                io = sess.io_binding()
                for k, v in f.items():
                    io.bind_cpu_input(k, v)
                for n in [o.name for o in sess.get_outputs()]:
                    io.bind_output(n, dev if n in to_dev else "cpu")
                sess.run_with_iobinding(io)
                return [o.numpy() for o in io.get_outputs() if o.device_name() == "cpu"]

            return go

        rows = {
            "plain run(None)": lambda: plain.run(None, f),
            "plain bound": bound(plain, set()),
            "on-demand graph, all to host": lambda: od.run(None, f),
            "on-demand graph, model outputs only": lambda: od.run(model_outs, f),
            "on-demand graph, Q/Kᵀ on device": bound(od, set(outs) - set(model_outs)),
            "attnviz run (in-process)": lambda: m.run(f, mode="ondemand"),
        }
        for fn in rows.values():
            fn()
            fn()
        took: dict[str, list[float]] = {k: [] for k in rows}
        cpu: dict[str, list[float]] = {k: [] for k in rows}
        for r in range(a.rounds):
            for k in list(rows) if r % 2 == 0 else reversed(list(rows)):
                for _ in range(a.runs):
                    t0, c0 = time.perf_counter(), time.process_time()
                    x = rows[k]()
                    del x
                    took[k].append(time.perf_counter() - t0)
                    cpu[k].append(time.process_time() - c0)
        base = statistics.median(took["plain run(None)"])
        print(
            f"\n{a.tokens} tokens, {a.provider}; medians of {a.rounds} x {a.runs} runs; load {os.getloadavg()[0]:.1f}"
        )
        print("| row | ms a run | vs plain | CPU ms |\n|---|---:|---:|---:|")
        for k, v in took.items():
            print(
                f"| {k} | {1000 * statistics.median(v):.2f} | {statistics.median(v) / base:.3f}× | "
                f"{1000 * statistics.median(cpu[k]):.2f} |"
            )


if __name__ == "__main__":
    main()
