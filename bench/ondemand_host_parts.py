"""Where an isolated on-demand run's host time goes, per part, wall and CPU, in two attnviz trees (issue 26; session
25, odiso25).  Each tree is copied to a temporary folder and instrumented there (``FINE`` stamps: wall and the
thread's CPU at each step of the parent's call and the child's request, patched into child.py and worker.py by
string; a tree whose code moved fails with "missing: ..."), then run in alternating processes over one exported
MiniLM with ``ATTNVIZ_QK_DEVICE=on`` (Q/Kᵀ kept: the CUDA path's code; CPU values on a CPU).  ``ATTNVIZ_TRACE``'s
four phases merge parts that moved between sides; these split them, and add the CPU each side spends.

    OMP_NUM_THREADS=1 python bench/ondemand_host_parts.py --a /tmp/A --b . --tokens 256 --rounds 3 --runs 40

"call host part": the call's wall (parent called -> returned) less onnxruntime's run, median over runs; "parent
CPU in call": its thread's CPU up to the request sent and from the wake-up to the return; "while waiting": what
it does between (outputs made ahead, the 50 ms cancel polls); "child CPU": request read -> onnxruntime, and
onnxruntime -> waiting for the next request (its bookkeeping after the reply included).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent


# (file, text, the text with stamps, whether the tree must have it); the stamps: FINE lists of (step, wall, the
# thread's CPU), the child's read back through its "trace" request
PATCHES = [
    (
        "child.py",
        "        t0 = time.perf_counter()\n        while not self.lock.acquire(timeout=POLL_S):",
        '        t0 = time.perf_counter()\n        S = FINE.append if FINE is not None else (lambda x: None)\n        S(("p0", t0, time.thread_time()))\n        while not self.lock.acquire(timeout=POLL_S):',
        True,
    ),
    (
        "child.py",
        "            try:\n                status, reply = pickle.loads(self.read())",
        '            S(("p_woke", time.perf_counter(), time.thread_time()))\n            try:\n                status, reply = pickle.loads(self.read())',
        True,
    ),
    (
        "child.py",
        "                t2 = time.perf_counter()\n                out = (made or ahead.make()).outputs",
        '                t2 = time.perf_counter()\n                S(("p_loads", t2, time.thread_time()))\n                out = (made or ahead.make()).outputs\n                S(("p_adopt", time.perf_counter(), time.thread_time()))',
        False,
    ),
    ("child.py", "POLL_S = 0.05", "POLL_S = 0.05\nFINE = [] if os.environ.get('FINE') else None", True),
    (
        "child.py",
        "            t1 = time.perf_counter()\n",
        '            t1 = time.perf_counter()\n            S(("p_sent", t1, time.thread_time()))\n',
        True,
    ),
    (
        "child.py",
        '            if status == "ok" and adopt is not None:\n                t2 = time.perf_counter()',
        '            if status == "ok" and adopt is not None:\n                t2 = time.perf_counter()\n                S(("p_loads", t2, time.thread_time()))',
        True,
    ),
    (
        "child.py",
        "                out = adopt(reply)\n                if self.trace",
        '                out = adopt(reply)\n                S(("p_adopt", time.perf_counter(), time.thread_time()))\n                if self.trace',
        True,
    ),
    (
        "worker.py",
        "                op, args = conn.recv() if fd is None else pickle.loads(read_message(fd))",
        '                FINE.append(("c_wait", time.perf_counter(), time.thread_time()))\n                _m = read_message(fd)\n                FINE.append(("c_read", time.perf_counter(), time.thread_time()))\n                op, args = pickle.loads(_m)\n                FINE.append(("c_loads", time.perf_counter(), time.thread_time()))',
        True,
    ),
    (
        "worker.py",
        "    server.send = conn.send_bytes if fd is None else (lambda data: write_message(fd, data))",
        '    def _send(data):\n        FINE.append(("c_send0", time.perf_counter(), time.thread_time()))\n        write_message(fd, data)\n        FINE.append(("c_sent", time.perf_counter(), time.thread_time()))\n    server.send = _send',
        True,
    ),
    (
        "worker.py",
        '    def take_trace(self) -> list[tuple[float, ...]]:\n        """The run stamps recorded since the last call (empty when tracing is off)."""\n        out,',
        '    def take_trace(self):\n        """The run stamps recorded since the last call (empty when tracing is off)."""\n        if os.environ.get("FINE"):\n            f = list(FINE); FINE.clear(); return f\n        out,',
        True,
    ),
    (
        "worker.py",
        "            sess.run_with_iobinding(io)\n            self._ort_span = (t0, time.perf_counter())",
        '            FINE.append(("c_ort0", t0, time.thread_time()))\n            sess.run_with_iobinding(io)\n            self._ort_span = (t0, time.perf_counter())\n            FINE.append(("c_ort1", self._ort_span[1], time.thread_time()))',
        False,
    ),
    (
        "worker.py",
        "            sess.run_with_iobinding(again.io)\n            self._ort_span = (t0, time.perf_counter())",
        '            FINE.append(("c_ort0", t0, time.thread_time()))\n            sess.run_with_iobinding(again.io)\n            self._ort_span = (t0, time.perf_counter())\n            FINE.append(("c_ort1", self._ort_span[1], time.thread_time()))',
        False,
    ),
    (
        "worker.py",
        "        self.settle()\n",
        '        FINE.append(("c_handled", time.perf_counter(), time.thread_time()))\n        self.settle()\n        FINE.append(("c_settled", time.perf_counter(), time.thread_time()))\n',
        True,
    ),
    ("worker.py", "def _light_package", "FINE = []\n\ndef _light_package", True),
]


def instrument(tree: str) -> None:
    for name, old, new, must in PATCHES:
        path = os.path.join(tree, "attnviz", "runtime", name)
        s = open(path).read()
        if old not in s:
            if must:
                raise SystemExit(f"{name}: missing {old[:60]!r}")
            continue
        open(path, "w").write(s.replace(old, new))


def one(model: str, tokens: int, runs: int, provider: str) -> dict:
    import gc
    import time

    os.environ["ATTNVIZ_TRACE"] = "1"
    os.environ["FINE"] = "1"
    import numpy as np

    import attnviz.runtime.child as child
    import attnviz.runtime.host as host
    from attnviz.runtime import open_model

    ids = np.full((1, tokens), 7, np.int64)
    f = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    m = open_model(model, provider=provider, threads=1)
    for _ in range(3):
        r = m.run(f, mode="ondemand")
        del r
    h = host._host
    h.call("trace")
    child.FINE.clear()
    gc.disable()
    walls = []
    cpus = []
    for _ in range(runs):
        t0 = time.perf_counter()
        c0 = time.process_time()
        r = m.run(f, mode="ondemand")
        del r
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    gc.enable()
    par = [("P",) + e for e in child.FINE]
    child.FINE.clear()
    ch = [("C",) + e for e in h.call("trace")]

    def split(evs, first):
        segs = []
        for e in evs:
            if e[1] == first:
                segs.append({})
            if segs:
                segs[-1].setdefault(e[1], e[2:])
        return segs

    ps, cs = split(par, "p0")[:runs], split(ch, "c_read")[:runs]
    runs_ev = [{**a, **b} for a, b in zip(ps, cs)]

    def W(d, a, b):
        return d[b][0] - d[a][0]

    def C(d, a, b):
        return d[b][1] - d[a][1]

    rows = {
        "parent: call -> sent": ("p0", "p_sent"),
        "sent -> child read": ("p_sent", "c_read"),
        "child: read -> loads": ("c_read", "c_loads"),
        "child: loads -> ort": ("c_loads", "c_ort0"),
        "child: ort -> send": ("c_ort1", "c_send0"),
        "child: send syscall": ("c_send0", "c_sent"),
        "send -> parent woke": ("c_send0", "p_woke"),
        "parent: woke -> loaded": ("p_woke", "p_loads"),
        "parent: adopt": ("p_loads", "p_adopt"),
        "child: after send -> waiting": ("c_sent", "c_wait"),
    }
    out = {}
    for k, (a, b) in rows.items():
        v = [W(d, a, b) for d in runs_ev if a in d and b in d]
        out[k] = 1000 * statistics.median(v)
    ok = [
        d
        for d in runs_ev
        if all(x in d for x in ("p0", "p_adopt", "c_ort0", "c_ort1", "c_read", "c_sent", "c_wait", "p_sent"))
    ]
    out["call host part (wall, call less ort)"] = 1000 * statistics.median(
        [W(d, "p0", "p_adopt") - W(d, "c_ort0", "c_ort1") for d in ok]
    )
    pc = [C(d, "p0", "p_sent") + C(d, "p_woke", "p_adopt") for d in ok]
    cc = [C(d, "c_read", "c_ort0") + C(d, "c_ort1", "c_wait") for d in ok]
    out["parent CPU in call (less the wait)"] = 1000 * statistics.median(pc)
    out["child CPU (read..ort, ort..waiting)"] = 1000 * statistics.median(cc)
    out["parent CPU while waiting (made ahead, poll)"] = 1000 * statistics.median(
        [C(d, "p_sent", "p_woke") for d in ok]
    )
    out["round trip CPU (both, waiting included)"] = 1000 * statistics.median(
        [a + b + C(d, "p_sent", "p_woke") for a, b, d in zip(pc, cc, ok)]
    )
    out["round trip CPU (both)"] = 1000 * statistics.median([a + b for a, b in zip(pc, cc)])
    out["m.run less ort (wall)"] = 1000 * statistics.median(
        [w - W(d, "c_ort0", "c_ort1") for w, d in zip(walls, runs_ev)]
    )
    out["parent CPU per m.run"] = 1000 * statistics.median(cpus)
    out["ort run"] = 1000 * statistics.median([W(d, "c_ort0", "c_ort1") for d in ok])
    out["n"] = len(ok)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", help="tree A (git archive main attnviz | tar -x -C DIR)")
    ap.add_argument("--b", default=str(ROOT.parent), help="tree B (default: this checkout)")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--provider", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--model", help="an exported MiniLM of at least --tokens positions (default: exported here)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one, a.tokens, a.runs, a.provider)))
        return
    if not a.a:
        ap.error("--a (tree A) is required")
    with tempfile.TemporaryDirectory() as tmp:
        model = a.model
        if model is None:
            from engine_bench import export_minilm

            model = str(export_minilm(Path(tmp), max(512, a.tokens)))
        trees = {}
        for tag, tree in (("A", a.a), ("B", a.b)):
            trees[tag] = os.path.join(tmp, tag)
            shutil.copytree(os.path.join(tree, "attnviz"), os.path.join(trees[tag], "attnviz"))
            instrument(trees[tag])
        got: dict[str, list[dict]] = {"A": [], "B": []}
        loads = []
        for _ in range(a.rounds):
            for tag in ("A", "B"):
                # the tree first (its attnviz), then what the caller's path holds (a device's onnxruntime-gpu)
                path = os.pathsep.join([trees[tag], *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
                env = dict(os.environ, PYTHONPATH=path, ATTNVIZ_QK_DEVICE="on")
                cmd = [sys.executable, __file__, "--one", model, "--tokens", str(a.tokens), "--runs", str(a.runs)]
                cmd += ["--provider", a.provider]
                res = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if res.returncode:
                    raise SystemExit(res.stderr[-3000:])
                got[tag].append(json.loads(res.stdout.strip().splitlines()[-1]))
                loads.append(os.getloadavg()[0])
    print(
        f"{a.tokens} tokens, {a.provider}, {a.rounds} rounds x {a.runs} runs; load (1 min) {min(loads):.1f}-{max(loads):.1f}"
    )
    print("| part (median of round medians, ms) | A | B | B/A |\n|---|---:|---:|---:|")
    for k in got["A"][0]:
        va = statistics.median(r[k] for r in got["A"])
        vb = statistics.median(r[k] for r in got["B"])
        print(f"| {k} | {va:.3f} | {vb:.3f} | {vb / va if va else float('nan'):.2f} |")


if __name__ == "__main__":
    main()
