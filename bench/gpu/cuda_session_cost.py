"""What a CUDA session of the corpus's statistics graph costs to make, by graph optimisation level and by how its
graph was kept (issue 26, the corpus on CUDA: the statistics session is optimised again at every command because a
graph saved optimised for the CUDA provider carries Memcpy nodes that fail to load, onnxruntime #11348/#17837).

Each variant runs in a fresh process, rounds interleaved: import onnxruntime, ``ort.preload_dlls()`` (attnviz calls
it, plain does not), the session, its first run, then the median of 20 runs of one batch (32 items × 24 tokens) —
a level that makes the session faster to build but each batch slower loses 313 batches' worth on a 10k corpus.

    python bench/gpu/cuda_session_cost.py --model /tmp/attnviz_corpus_bench/minilm.onnx --provider cuda
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

LEVELS = {"all": 99, "extended": 2, "basic": 1, "disable": 0}


def child(spec: dict) -> None:
    t0 = time.perf_counter()
    import numpy as np
    import onnxruntime as ort

    t1 = time.perf_counter()
    if spec["preload"]:
        try:
            ort.preload_dlls()
        except Exception:
            pass
    t2 = time.perf_counter()
    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.graph_optimization_level = ort.GraphOptimizationLevel(LEVELS[spec["level"]])
    if spec.get("save"):
        so.optimized_model_filepath = spec["save"]
    prov = (
        [("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"]
        if spec["provider"] == "cuda" and not spec.get("save_on_cpu")
        else ["CPUExecutionProvider"]
    )
    try:
        sess = ort.InferenceSession(spec["path"], so, providers=prov)
    except Exception as e:  # a saved CUDA graph that does not load back: say so, it is the finding
        print(json.dumps({"error": str(e).splitlines()[0][:200]}))
        return
    t3 = time.perf_counter()
    if spec.get("save"):  # as attnviz keeps a CPU graph (runtime/session.py _kept): else an If may not load back
        from attnviz.runtime.optgraph import unique_subgraph_names

        unique_subgraph_names(spec["save"])
    rng = np.random.default_rng(0)
    from attnviz.runtime.statfeeds import stat_feeds

    sp = np.zeros((32, 24), bool)
    sp[:, [0, 23]] = True  # [CLS] ... [SEP]
    extra, _ = stat_feeds(np.full(32, 24), sp, 24)
    feeds = {}
    for i in sess.get_inputs():
        if i.name in extra:
            feeds[i.name] = extra[i.name]
        elif "mask" in i.name:
            feeds[i.name] = np.ones((32, 24), np.int64)
        elif "type" in i.name:
            feeds[i.name] = np.zeros((32, 24), np.int64)
        else:
            feeds[i.name] = rng.integers(1000, 2000, (32, 24)).astype(np.int64)
    outs = sess.run(None, feeds)
    t4 = time.perf_counter()
    check = float(sum(np.nan_to_num(np.asarray(o, np.float64)).sum() for o in outs if o.dtype.kind == "f"))
    runs = []
    for _ in range(20):
        a = time.perf_counter()
        sess.run(None, feeds)
        runs.append(time.perf_counter() - a)
    print(
        json.dumps(
            {
                "import": t1 - t0,
                "preload": t2 - t1,
                "session": t3 - t2,
                "first": t4 - t3,
                "run": statistics.median(runs),
                "provider": sess.get_providers()[0],
                "check": check,
            }
        )
    )


def stats_graph(model: str, out: Path, join: bool) -> None:
    from attnviz.runtime.model import open_model
    from attnviz.runtime.statgraph import stats_model

    m = open_model(model, provider="cpu")
    m.probe()
    sites = m.graph_sites
    g, _, on = stats_model(m.graph, sites, set(range(len(sites))), False, join)
    out.write_bytes(g.SerializeToString())
    print(f"statistics graph: {len(g.graph.node)} nodes, {len(on)} of {len(sites)} sites reduced in the graph")


def run(spec: dict) -> dict:
    p = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True, timeout=120
    )
    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
    if not lines:
        return {"error": (p.stderr.strip().splitlines() or ["no output"])[-1][:200]}
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--model", default="/tmp/attnviz_corpus_bench/minilm.onnx")
    ap.add_argument("--provider", choices=["cpu", "cuda"], default="cuda")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if a.child:
        return child(json.loads(a.child))
    work = Path(a.model).parent  # beside the model: the graph names its external weights relative to it
    stats = work / "csc_stats.onnx"
    stats_graph(a.model, stats, join=a.provider == "cuda")
    # graphs kept optimised: BASIC is the provider-independent level (before partitioning), ALL carries the
    # provider's fused nodes and its Memcpy nodes
    for level, on_cpu in (("basic", False), ("all", False), ("extended", True)):
        name = f"{level}{'_cpu' if on_cpu else ''}"
        r = run(
            {
                "path": str(stats),
                "level": level,
                "preload": True,
                "provider": a.provider,
                "save_on_cpu": on_cpu,
                "save": str(work / f"csc_stats_{name}.onnx"),
            }
        )
        print(f"saved at {name}: {r}")
    P = a.provider
    variants = {
        "plain model, all, no preload (plain's)": {"path": a.model, "level": "all", "preload": False},
        "stats, all, preload (attnviz's)": {"path": str(stats), "level": "all", "preload": True},
        "stats, all, no preload": {"path": str(stats), "level": "all", "preload": False},
        "stats, extended": {"path": str(stats), "level": "extended", "preload": True},
        "stats, basic": {"path": str(stats), "level": "basic", "preload": True},
        "stats, disable": {"path": str(stats), "level": "disable", "preload": True},
        "stats kept at basic, loaded at all": {
            "path": str(work / "csc_stats_basic.onnx"),
            "level": "all",
            "preload": True,
        },
        "stats kept at basic, loaded at basic": {
            "path": str(work / "csc_stats_basic.onnx"),
            "level": "basic",
            "preload": True,
        },
        "stats kept at all, loaded at disable": {
            "path": str(work / "csc_stats_all.onnx"),
            "level": "disable",
            "preload": True,
        },
        "stats kept at extended by CPU, loaded at disable": {
            "path": str(work / "csc_stats_extended_cpu.onnx"),
            "level": "disable",
            "preload": True,
        },
        "stats kept at extended by CPU, loaded at basic": {
            "path": str(work / "csc_stats_extended_cpu.onnx"),
            "level": "basic",
            "preload": True,
        },
    }
    got: dict[str, list[dict]] = {k: [] for k in variants}
    for r in range(a.rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for k in order:
            got[k].append(run({**variants[k], "provider": P}))
    print(f"\n{P}, median of {a.rounds} fresh processes (s; run = one batch of 32 x 24, median of 20)")
    print(
        f"{'variant':50s} {'import':>7s} {'preload':>8s} {'session':>8s} {'first':>7s} {'run ms':>7s}  provider, outputs' sum"
    )
    for k, rs in got.items():
        ok = [x for x in rs if "error" not in x]
        if not ok:
            print(f"{k:50s} error: {rs[0]['error']}")
            continue
        med = {f: statistics.median(x[f] for x in ok) for f in ("import", "preload", "session", "first", "run")}
        print(
            f"{k:50s} {med['import']:7.3f} {med['preload']:8.3f} {med['session']:8.3f} {med['first']:7.3f} "
            f"{1000 * med['run']:7.2f}  {ok[0]['provider'][:4]}, {ok[0]['check']:.6g}"
        )


sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
