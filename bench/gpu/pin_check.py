"""GPU check (issue 26 item 3): page-locked output slots on CUDA against pageable ones, and against plain onnxruntime.

    python bench/gpu/pin_check.py [--rounds 5] [--runs 2]      (~60-90 s on an H100; needs the CUDA provider)

Model: MiniLM's shape (6 layers x 12 heads, hidden 384; bench/engine_bench.export_minilm, position table tiled to
4,096).  Cases: on-demand maps at 2,048 and 4,096 tokens (batch 1), every dense map at 512 tokens batch 8.
Rows, each a long-lived process of its own (loaded once, then driven case by case; rounds interleaved, the order
alternating), one onnxruntime thread:
  plain            onnxruntime.InferenceSession(..., CUDA use_tf32=0).run(None, feeds)
  iso pinned       AttentionModel.run in the crash-isolation child, its slots page-locked (runtime/pinning.py)
  iso pageable     the same with ATTNVIZ_PIN=off
  inproc pinned    ATTNVIZ_INPROCESS=1
  inproc pageable  ATTNVIZ_INPROCESS=1 ATTNVIZ_PIN=off
  iso qk-host      on-demand's Q and Kᵀ brought to the host (ATTNVIZ_QK_DEVICE=off: how CUDA ran before session 13;
  inproc qk-host   the other rows keep them on the GPU with ATTNVIZ_QK_DEVICE=on (run_kept.sh sets it), runtime/kept.py, and compute a drawn head there)
Prints the median wall per run, its ratio to plain, each row's info["pinned"] and map class, and whether the maps
(on-demand: each site's first head, with each site's Q and Kᵀ where they are on the host; dense: every map) are
bit-equal between pinned and pageable; for on-demand also the median time to draw one head (site 0, head 0,
recomputed) and the largest difference between the heads drawn from kept Q/Kᵀ and from host ones.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CASES = [("ondemand", 2048, 1), ("ondemand", 4096, 1), ("dense", 512, 8)]
SMALL = [("ondemand", 256, 1), ("dense", 64, 2)]  # --small: a CPU smoke run of the script itself
ROWS = {
    "plain": {},
    "iso pinned": {},
    "iso pageable": {"ATTNVIZ_PIN": "off"},
    "inproc pinned": {"ATTNVIZ_INPROCESS": "1"},
    "inproc pageable": {"ATTNVIZ_INPROCESS": "1", "ATTNVIZ_PIN": "off"},
    "iso qk-host": {"ATTNVIZ_QK_DEVICE": "off"},
    "inproc qk-host": {"ATTNVIZ_INPROCESS": "1", "ATTNVIZ_QK_DEVICE": "off"},
}


def case_feeds(t: int, b: int) -> dict:
    rng = np.random.default_rng(t * 10 + b)
    ids = rng.integers(1000, 20000, (b, t)).astype(np.int64)
    ids[:, 0], ids[:, -1] = 101, 102
    return {"input_ids": ids, "attention_mask": np.ones((b, t), np.int64)}


def digest(result) -> str:
    h = hashlib.blake2b(digest_size=12)
    for m in result.maps:
        if hasattr(m, "q"):  # on-demand: what the run kept where it is on the host, and a head recomputed from it
            for v in (m.q, m.k):
                if isinstance(v, np.ndarray):  # a KeptMap's stay on the GPU (runtime/kept.py)
                    h.update(np.ascontiguousarray(v).tobytes())
            h.update(m.head(0, 0).tobytes())
        else:
            h.update(np.ascontiguousarray(m.array()).tobytes())
    return h.hexdigest()


def heads(result, into: Path) -> dict:
    """An on-demand result's first head of every site (every 32nd row: 12 MB at 4,096 tokens, not 400) saved to
    ``into`` (the driver compares rows' files), and the median time to draw site 0's first head (three draws)."""
    if not hasattr(result.maps[0], "q"):
        return {}
    np.save(into, np.stack([m.head(0, 0)[::32] for m in result.maps]))
    took = []
    for _ in range(3):
        t0 = time.perf_counter()
        result.maps[0].head(0, 0)
        took.append(time.perf_counter() - t0)
    return {"heads": str(into), "head_ms": statistics.median(took) * 1000}


def worker(row: str, path: str, provider: str, cases: list) -> None:
    """One row: load once, then answer the driver's lines ("run CASE N" / "check CASE") with one JSON line each."""
    feeds = [case_feeds(t, b) for _, t, b in cases]
    if row == "plain":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        cuda = [("CUDAExecutionProvider", {"use_tf32": "0"})] if provider == "cuda" else []
        s = ort.InferenceSession(path, so, providers=[*cuda, "CPUExecutionProvider"])
        assert provider != "cuda" or s.get_providers()[0] == "CUDAExecutionProvider", s.get_providers()
        runs = [lambda f=f: s.run(None, f) for f in feeds]
    else:
        from attnviz.runtime import open_model

        m = open_model(path, provider=provider, threads=1)
        runs = [lambda f=f, mode=mode: m.run(f, mode=mode) for (mode, _, _), f in zip(cases, feeds)]
    for run in runs:  # warm: sessions, arenas, slots (twice: the second run binds into learned slots)
        run()
        run()
    print(json.dumps("ready"), flush=True)
    for line in sys.stdin:
        op, *args = line.split()
        i = int(args[0])
        if op == "run":
            out = []
            for _ in range(int(args[1])):
                t0 = time.perf_counter()
                r = runs[i]()
                out.append(time.perf_counter() - t0)
                del r
        else:
            r = runs[i]()
            out = {"digest": "" if row == "plain" else digest(r), "pinned": getattr(r, "info", {}).get("pinned")}
            if row != "plain":
                out["maps"] = type(r.maps[0]).__name__
                out.update(heads(r, Path(path).parent / f"heads-{row.replace(' ', '_')}-{i}.npy"))
            del r
        print(json.dumps(out), flush=True)


class Row:
    def __init__(self, name: str, path: Path, provider: str, small: bool):
        env = {**os.environ, **ROWS[name], "OMP_NUM_THREADS": "1"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        if "ATTNVIZ_PIN" not in ROWS[name]:
            env.pop("ATTNVIZ_PIN", None)  # (ATTNVIZ_QK_DEVICE=on from outside reaches the other rows: a CPU smoke)
        self.p = subprocess.Popen(
            [sys.executable, __file__, "--worker", name, str(path), provider, *(["--small"] if small else [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def ask(self, line: str | None = None):
        assert self.p.stdin is not None and self.p.stdout is not None
        if line is not None:
            self.p.stdin.write(line + "\n")
            self.p.stdin.flush()
        got = self.p.stdout.readline()
        if not got:
            raise SystemExit(f"a row's process ended (rc {self.p.wait()}): see its stderr above")
        return json.loads(got)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (each: every row, --runs runs)")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--provider", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--small", action="store_true", help="short inputs (a smoke run of this script on CPU)")
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    cases = SMALL if a.small else CASES
    if a.worker:
        worker(*a.worker, cases)
        return
    sys.path.insert(0, str(ROOT / "bench"))
    from engine_bench import export_minilm

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = export_minilm(Path(tmp), max(t for _, t, _ in cases))
        print(f"export {time.perf_counter() - t0:.0f} s; load average {os.getloadavg()[0]:.1f}", flush=True)
        rows = {name: Row(name, path, a.provider, a.small) for name in ROWS}  # all load at once
        for r in rows.values():
            r.ask()
        print(f"rows ready {time.perf_counter() - t0:.0f} s", flush=True)
        print(
            "| case | tokens x batch | row | median wall | vs plain | pinned | maps | a head drawn |\n"
            "|---|---|---|---|---|---|---|---|",
            flush=True,
        )
        for i, (mode, t, b) in enumerate(cases):
            times: dict[str, list[float]] = {n: [] for n in rows}
            for k in range(a.rounds):
                for n in list(rows) if k % 2 == 0 else list(reversed(rows)):
                    times[n] += rows[n].ask(f"run {i} {a.runs}")
            checks = {n: rows[n].ask(f"check {i}") for n in rows}
            base = statistics.median(times["plain"])
            for n in rows:
                w = statistics.median(times[n])
                c = checks[n]
                head = f"{c['head_ms']:.1f} ms" if "head_ms" in c else "-"
                print(
                    f"| {mode} | {t} x {b} | {n} | {w * 1000:.1f} ms | {w / base:.3f}x | {c['pinned'] or '-'} "
                    f"| {c.get('maps', '-')} | {head} |"
                )
            for layout in ("iso", "inproc"):
                d1, d2 = checks[f"{layout} pinned"]["digest"], checks[f"{layout} pageable"]["digest"]
                print(f"  {layout}: maps pinned == pageable (bit-equal): {d1 == d2}", flush=True)
                kept, hosted = checks[f"{layout} pinned"].get("heads"), checks[f"{layout} qk-host"].get("heads")
                if kept and hosted:
                    diff = float(np.abs(np.load(kept).astype(np.float64) - np.load(hosted)).max())
                    print(f"  {layout}: every site's first head, kept Q/Kᵀ vs host Q/Kᵀ: max |diff| {diff:.2e}")
        for r in rows.values():
            assert r.p.stdin is not None
            r.p.stdin.close()
            r.p.wait(30)
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
