"""Where an isolated run's time goes, stage by stage, against plain onnxruntime (issue 8, the 128-token target).

    python bench/engine_breakdown_bench.py [--lengths 128 512] [--rounds 60] [--threads 2] [--model M.onnx]

Model: all-MiniLM-L6-v2 in one file with its weights inside (as bench/engine_memory_bench.py; ``--model`` reuses
an export).  Three cases run interleaved in one process, order rotated each round: *plain* (one
``InferenceSession(path).run``), *attnviz* (``AttentionModel.run`` through the crash-isolation child, the default)
and *in-process* (``ATTNVIZ_INPROCESS=1``).  With ``ATTNVIZ_TRACE=1`` both processes stamp every run on the same
monotonic clock (``host.take_trace``), so each attnviz run splits into:

  before      AttentionModel.run up to the host call (feed checks, fetch list)
  send        lock, slots handed back, large feeds into the feed area, pickle + socket write (ends when the
              child has the request, if that comes first)
  to child    until the child has the request (its wake-up, unpickling)
  child pre   the child's handler before onnxruntime (slots, shapes, feed binding)
  ort         onnxruntime's run_with_iobinding in the child
  child post  the child's handler after it (shape learning, trimming)
  to parent   reply pickled, written, the parent woken, unpickled
  adopt       new slots mapped, the arrays lent
  after       maps collected, site info, the run's result built

*rq wait* is the time the process's threads spent runnable but not running during the run
(``/proc/PID/task/*/schedstat``): plain's for this process, attnviz's for the child (the parent is blocked).  On a
shared machine it shows how much of a difference is other load rather than the engine.  *cpu* is the CPU time
of the same threads (plain: this process; attnviz: the child alone), from the same file, in nanoseconds: it
moves far less with load than wall time.

Then, per length, the huge-pages A/B: the instrumented session in two isolation children alive at once, one
started with ``ATTNVIZ_HUGEPAGES=1`` (its malloc asks for transparent huge pages) and one with ``ATTNVIZ_HUGEPAGES=0``,
against plain, interleaved (``--no-hugepages-ab`` skips it).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ["ATTNVIZ_TRACE"] = "1"  # read when the isolation child starts (here and in it)
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np
from engine_bench import export_minilm, feeds

STAGES = ("before", "send", "to child", "child pre", "ort", "child post", "to parent", "adopt", "after")


def sched(pid: int) -> tuple[int, int]:
    """(ns on CPU, ns runnable but waiting) summed over a process's threads."""
    run = wait = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                a = fh.read().split()
        except OSError:
            continue
        run, wait = run + int(a[0]), wait + int(a[1])
    return run, wait


def measure(model: Path, t: int, rounds: int, threads: int, hold: bool = False) -> dict:
    import onnxruntime as ort

    from attnviz.runtime import host, open_model
    from attnviz.runtime.session import session_options

    plain = ort.InferenceSession(str(model), session_options(threads), providers=["CPUExecutionProvider"])
    am = open_model(model, provider="cpu", threads=threads)
    os.environ["ATTNVIZ_INPROCESS"] = "1"  # read when a session is made: this model's sessions stay in-process
    am_in = open_model(model, provider="cpu", threads=threads)
    f = feeds(t)
    am_in.run(f, mode="dense")
    del os.environ["ATTNVIZ_INPROCESS"]
    for _ in range(3):
        plain.run(None, f)
        am.run(f, mode="dense")
        am_in.run(f, mode="dense")
    assert host._host is not None
    child, me = host._host.proc.pid, os.getpid()
    host.take_trace()
    wall: dict[str, list[float]] = {"plain": [], "attnviz": [], "in-process": []}
    rq: dict[str, list[float]] = {"plain": [], "attnviz": []}
    cpu: dict[str, list[float]] = {"plain": [], "attnviz": []}
    spans: list[tuple[float, float]] = []

    def run_plain():
        s0, t0 = sched(me), time.perf_counter()
        plain.run(None, f)
        t1, s1 = time.perf_counter(), sched(me)
        wall["plain"].append(t1 - t0)
        rq["plain"].append((s1[1] - s0[1]) / 1e9)
        cpu["plain"].append((s1[0] - s0[0]) / 1e9)

    held: list = []

    def run_attnviz():
        s0, t0 = sched(child), time.perf_counter()
        r = am.run(f, mode="dense")
        t1 = time.perf_counter()
        # dropped at once, as the other cases' results: its slots go back with the next request, which then
        # repeats this one; --hold keeps it until the next result is in, as the window does (a planned run)
        held[:] = [r] if hold else []
        del r
        s1 = sched(child)
        wall["attnviz"].append(t1 - t0)
        rq["attnviz"].append((s1[1] - s0[1]) / 1e9)
        cpu["attnviz"].append((s1[0] - s0[0]) / 1e9)
        spans.append((t0, t1))

    def run_in():
        t0 = time.perf_counter()
        am_in.run(f, mode="dense")
        wall["in-process"].append(time.perf_counter() - t0)

    cases = [run_plain, run_attnviz, run_in]
    for r in range(rounds):
        for fn in cases[r % 3 :] + cases[: r % 3]:
            fn()
    parent, kid = host.take_trace()
    assert len(parent) == len(kid) == len(spans), (len(parent), len(kid), len(spans))
    stages: dict[str, list[float]] = {k: [] for k in STAGES}
    for (a0, a1), (p0, p1, p2, p3), (c0, o0, o1, c1) in zip(spans, parent, kid):
        p1 = min(p1, c0)  # the child can have the request before the parent's send returns (it was preempted)
        for k, v in zip(STAGES, (p0 - a0, p1 - p0, c0 - p1, o0 - c0, o1 - o0, c1 - o1, p2 - c1, p3 - p2, a1 - p3)):
            stages[k].append(v)
    return {"wall": wall, "rq": rq, "cpu": cpu, "stages": stages}


def hugepages_ab(model: Path, t: int, rounds: int, threads: int) -> dict[str, dict[str, list[float]]]:
    """The instrumented session in two isolation children at once, one with huge pages (the default) and one
    with ``ATTNVIZ_HUGEPAGES=0``, against plain in this process; interleaved, order rotated.  Wall and CPU
    (the child's threads; plain: this process) per run of ``_Host.run`` (IPC included, AttentionModel's own
    checks not)."""
    import onnxruntime as ort

    from attnviz.runtime import graph as gr
    from attnviz.runtime import host, open_model
    from attnviz.runtime.session import session_options

    am = open_model(model, provider="cpu", threads=threads)
    data, exposed = gr.instrumented_bytes(am.graph, am._sites, "dense")
    names = [o.name for o in am.outputs] + exposed.outputs
    f = feeds(t)
    plain = ort.InferenceSession(str(model), session_options(threads), providers=["CPUExecutionProvider"])
    hosts = {}
    for label, setting in (("child, huge pages", "1"), ("child, 4 kB pages", "0")):
        os.environ["ATTNVIZ_HUGEPAGES"] = setting  # read when the child starts
        h = host._Host()
        h.call("create", 1, data, {"provider": "cpu", "threads": threads, "external_dir": am.external_dir})
        hosts[label] = h
    os.environ.pop("ATTNVIZ_HUGEPAGES")
    cases = {"plain": (os.getpid(), lambda: plain.run(None, f))}
    for label, h in hosts.items():
        cases[label] = (h.proc.pid, lambda h=h: h.run(1, names, f))
    out: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": []} for k in cases}
    keys = list(cases)
    try:
        for _ in range(3):
            for _pid, fn in cases.values():
                fn()
        for r in range(rounds):
            for k in keys[r % len(keys) :] + keys[: r % len(keys)]:
                pid, fn = cases[k]
                s0, t0 = sched(pid)[0], time.perf_counter()
                x = fn()
                t1 = time.perf_counter()
                del x
                out[k]["wall"].append(t1 - t0)
                out[k]["cpu"].append((sched(pid)[0] - s0) / 1e9)
    finally:
        for h in hosts.values():
            h.kill()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", type=int, nargs="*", default=[128, 512])
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", help="an exported MiniLM .onnx to reuse (default: export one to a temp folder)")
    ap.add_argument("--no-hugepages-ab", action="store_true", help="skip the huge-pages A/B table")
    ap.add_argument("--hold", action="store_true", help="keep each attnviz result until the next (the window's way)")
    a = ap.parse_args()
    model = Path(a.model) if a.model else export_minilm(Path(tempfile.mkdtemp(prefix="attnviz-breakdown-")))
    load = open("/proc/loadavg").read().split()[:3]
    print(f"MiniLM-L6 (weights inside), CPU, {a.threads} threads, {a.rounds} interleaved rounds; load {' '.join(load)}")
    for t in a.lengths:
        r = measure(model, t, a.rounds, a.threads, a.hold)
        med = {k: 1e3 * float(np.median(v)) for k, v in r["wall"].items()}
        mn = {k: 1e3 * float(np.min(v)) for k, v in r["wall"].items()}
        print(f"\n{t} tokens            median ms   min ms   median / plain   min / plain")
        for k in ("plain", "attnviz", "in-process"):
            print(
                f"  {k:<18} {med[k]:>9.2f} {mn[k]:>8.2f} {med[k] / med['plain']:>15.3f}x {mn[k] / mn['plain']:>12.3f}x"
            )
        plain_w = np.array(r["wall"]["plain"])
        for k in ("attnviz", "in-process"):  # each round's runs are adjacent: a ratio per round is immune to drift
            paired = np.array(r["wall"][k]) / plain_w
            q1, q3 = np.percentile(paired, [25, 75])
            print(f"  {k} / plain in the same round: median {np.median(paired):.3f}x (quartiles {q1:.3f}-{q3:.3f})")
        print("  attnviz by stage (median / min ms):")
        for k in STAGES:
            v = 1e3 * np.array(r["stages"][k])
            print(f"    {k:<16} {np.median(v):>9.3f} {v.min():>8.3f}")
        ort_ms = 1e3 * np.array(r["stages"]["ort"])
        total = 1e3 * np.array(r["wall"]["attnviz"])
        print(f"    {'all but ort':<16} {np.median(total - ort_ms):>9.3f} {(total - ort_ms).min():>8.3f}")
        print(
            f"  ort in the child / plain: median {np.median(ort_ms) / med['plain']:.3f}x, min {ort_ms.min() / mn['plain']:.3f}x"
        )
        for what in ("rq", "cpu"):
            for k, v in r[what].items():
                v = 1e3 * np.array(v)
                label = "rq wait" if what == "rq" else "cpu"
                print(f"  {label}, {k:<9} median {np.median(v):8.3f} ms, min {v.min():8.3f} ms")

        if not a.no_hugepages_ab:
            ab = hugepages_ab(model, t, a.rounds, a.threads)
            print(f"  huge pages A/B, {t} tokens (the child's session run directly; cpu = that process's threads):")
            pm = {m: (float(np.median(ab["plain"][m])), float(np.min(ab["plain"][m]))) for m in ("wall", "cpu")}
            for k, v in ab.items():
                cells = []
                for m in ("wall", "cpu"):
                    med, mn = float(np.median(v[m])), float(np.min(v[m]))
                    cells.append(
                        f"{m} {1e3 * med:7.2f} / {1e3 * mn:7.2f} ms ({med / pm[m][0]:.3f}x / {mn / pm[m][1]:.3f}x)"
                    )
                print(f"    {k:<18} " + "   ".join(cells))


if __name__ == "__main__":
    main()
