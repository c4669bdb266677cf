"""The whole corpus command's wall timeline, by process and phase: plain onnxruntime against `attnviz corpus`.

    OMP_NUM_THREADS=1 python bench/corpus_timeline.py --provider cuda --items 10000 --rounds 3
    OMP_NUM_THREADS=1 ATTNVIZ_CORPUS_LAYOUT=threads python bench/corpus_timeline.py --provider cpu --items 1000
    OMP_NUM_THREADS=1 python bench/corpus_timeline.py --provider auto --items 10000 --rounds 3   (attnviz's default)

No source edits: bench/timeline_hook.py is installed as ``sitecustomize`` (a folder put first on PYTHONPATH; it hands
over to the image's own sitecustomize, if any) and stamps every process of each command on ``CLOCK_BOOTTIME``: its
birth (the kernel's start time), interpreter up, the key imports, the driver's and the workers' phases, each session
made (with its provider), the first run, the exit.  The commands are the ones bench/corpus_bench.py times (the same
MiniLM export, found as it finds it; the same corpus file and batches; attnviz byte-compiled first): plain is one
process that tokenises with tokenizers' ``encode_batch`` and runs the length-sorted batches in order through one
session × all cores (``--plain PxT``: P processes × T threads); attnviz is ``python -m attnviz corpus`` with
``--workers`` × ``--threads`` (on CUDA the bench's GPU row: 4 batches in flight × cores/4 threads), in the layout
``ATTNVIZ_CORPUS_LAYOUT`` forces (else the device's: threads on CUDA, processes on the CPU).  Rounds are interleaved;
each attnviz side first runs one unmeasured command on its own ``ATTNVIZ_CACHE_DIR`` (so every measured command is
a second command: what it keeps is read back).  ``--other-root DIR`` adds `attnviz corpus` run from another checkout
(DIR/attnviz: before and after).  Printed: a table of phase → seconds from launch (median of the rounds; "cpu"
rows: that process's CPU seconds), then what each process did (imports, sessions made by provider, probe run or
kept, statistics session built or kept), and the command walls per round with the load average.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

import corpus_bench as cb  # (the model export, corpus file and plain child, as the bench makes them)

LAYOUT_ENV = cb.LAYOUT_ENV


def _boot() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def hook_dir(work: Path) -> Path:
    d = work / "tl_hook"
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(BENCH / "timeline_hook.py", d / "sitecustomize.py")
    return d


def launch(cmd: list[str], cwd: Path, env: dict, stamps: Path) -> dict:
    """Run ``cmd`` with the hook stamping into ``stamps``: launch, driver gone (its wait), command returned (its
    pipes closed, as the bench times a command)."""
    shutil.rmtree(stamps, ignore_errors=True)
    stamps.mkdir(parents=True)
    env = {**env, "ATTNVIZ_TL_DIR": str(stamps)}
    t0 = _boot()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    got: dict[str, bytes] = {}

    def drain(name, pipe):
        got[name] = pipe.read()

    readers = [threading.Thread(target=drain, args=(n, s)) for n, s in (("out", p.stdout), ("err", p.stderr))]
    for r in readers:
        r.start()
    p.wait()
    gone = _boot()
    for r in readers:
        r.join()
    back = _boot()
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} failed ({p.returncode}): {got['err'][-2000:].decode(errors='replace')}")
    return {"t0": t0, "driver": p.pid, "gone": gone - t0, "returned": back - t0, "stamps": stamps}


def read_stamps(run: dict) -> dict:
    """Per process (driver, worker 1.., tracker, other): its birth and events, in seconds from the launch."""
    t0 = run["t0"]
    procs = []
    for f in Path(run["stamps"]).glob("*.tl"):
        pid = int(f.stem)
        lines = f.read_text().splitlines()
        if not lines or not lines[0].startswith("#proc"):
            continue
        _, cmd, born, _ = lines[0].split("\t")
        events = []
        for ln in lines[1:]:
            parts = ln.split("\t")
            if len(parts) == 4:
                events.append((parts[0], parts[1], float(parts[2]) - t0, float(parts[3])))
        procs.append({"pid": pid, "cmd": cmd, "born": float(born) - t0, "events": events})
    out: dict[str, dict] = {}
    workers = sorted(
        (p for p in procs if "spawn_main" in p["cmd"] and "resource_tracker" not in p["cmd"]), key=lambda p: p["born"]
    )
    for p in procs:
        if p["pid"] == run["driver"]:
            out["driver"] = p
        elif "resource_tracker" in p["cmd"]:
            out["tracker"] = p
        elif p in workers:
            out[f"worker {workers.index(p) + 1}"] = p
        else:
            out[f"other {p['pid']}"] = p
    return out


def first(p: dict | None, event: str, what: str, cpu: bool = False) -> float | None:
    if p is None:
        return None
    for e, w, t, c in p["events"]:
        if e == event and w == what:
            return c if cpu else t
    return None


def last(p: dict | None, event: str, what: str) -> float | None:
    found = [t for e, w, t, _ in (p or {}).get("events", []) if e == event and w == what]
    return found[-1] if found else None


def prefix(p: dict | None, event: str, start: str) -> list[tuple[str, float]]:
    return [(w, t) for e, w, t, _ in (p or {}).get("events", []) if e == event and w.startswith(start)]


def phases(run: dict) -> dict[str, float | None]:
    """The timeline of one command: phase → seconds from launch (``cpu``: CPU seconds of that process)."""
    ps = read_stamps(run)
    d, w1 = ps.get("driver"), ps.get("worker 1")
    r: dict[str, float | None] = {}
    r["driver: interpreter up"] = first(d, "up", "")
    for mod in ("numpy", "tokenizers", "onnx", "onnxruntime", "attnviz.corpus.run", "pyarrow"):
        r[f"driver: {mod} imported"] = first(d, "import-", mod)
    r["driver: pool spawned (WarmPool.start returned)"] = first(d, "call-", "engines.WarmPool.start")
    r["driver: cpu at the spawn (s CPU)"] = first(d, "call-", "engines.WarmPool.start", cpu=True)
    r["driver: model opened / summary read (_open)"] = first(d, "call-", "run._open")
    r["driver: corpus tokenised (attnviz: _probe_while_reading; plain: plain_batches)"] = first(
        d, "call-", "run._probe_while_reading"
    ) or first(d, "call-", "corpus_bench.plain_batches")
    r["driver: probe answered (_adopt_probe)"] = first(d, "call-", "run._adopt_probe")
    r["driver: planned (_planned)"] = first(d, "call-", "run._planned")
    r["driver: first partial folded"] = first(d, "call-", "reduce.Accumulator.fold")
    r["driver: last partial folded"] = last(d, "call-", "reduce.Accumulator.fold")
    r["driver: results written (output.write)"] = first(d, "call-", "output.write")
    r["driver: exit (atexit / os._exit)"] = first(d, "exit", "atexit") or first(d, "exit", "os._exit")
    r["driver: process gone"] = run["gone"]
    r["command returned (pipes closed)"] = run["returned"]
    # plain: its one process is the driver
    r["plain: session made"] = first(d, "call-", "corpus_bench._plain_session")
    if r["plain: session made"] is not None:
        r["plain: · its session took (s)"] = r["plain: session made"] - first(d, "call+", "ort.InferenceSession")
    r["plain: first run ended"] = first(d, "call-", "ort.first_run")
    r["plain: loop ended (plain_rate)"] = first(d, "call-", "corpus_bench.plain_rate")
    for name in sorted(k for k in ps if k.startswith("worker")):
        w = ps[name]
        r[f"{name}: born"] = w["born"]
        r[f"{name}: interpreter up"] = first(w, "up", "")
        r[f"{name}: onnxruntime imported"] = first(w, "import-", "onnxruntime")
        r[f"{name}: onnx imported"] = first(w, "import-", "onnx")
        r[f"{name}: probe answered (_probe)"] = first(w, "call-", "engines._probe")
        sessions = prefix(w, "call-", "session.make_session")
        starts = prefix(w, "call+", "session.make_session")
        for i, ((what, t), (_, t0)) in enumerate(zip(sessions[:3], starts)):
            r[f"{name}: session {i + 1} made ({what.split('[')[-1].rstrip(']')})"] = t
            r[f"{name}: · session {i + 1} took (s)"] = t - t0
        if first(w, "call-", "ort.preload_dlls") is not None:
            r[f"{name}: · CUDA libraries preloaded, took (s)"] = first(w, "call-", "ort.preload_dlls") - first(
                w, "call+", "ort.preload_dlls"
            )
        r[f"{name}: warm (_warm_up returned)"] = first(w, "call-", "engines._warm_up")
        r[f"{name}: first batch starts (_work)"] = first(w, "call+", "engines._work")
        r[f"{name}: cpu before its first batch (s CPU)"] = first(w, "call+", "engines._work", cpu=True)
        r[f"{name}: first run ended"] = first(w, "call-", "ort.first_run")
        r[f"{name}: last batch ends (_work)"] = last(w, "call-", "engines._work")
    if w1 is not None and r.get("driver: last partial folded") is not None:
        ends = [r[k] for k in r if k.endswith("last batch ends (_work)") and r[k] is not None]
        if ends:
            r["last batch ended → driver gone (s)"] = run["gone"] - max(ends)
    return r


def cpu_total(run: dict) -> float:
    """The CPU seconds of the command's processes (driver, workers, isolation child, tracker), each at its last stamp
    (its exit; a worker killed at the end: its last batch), summed."""
    return sum(max((c for _, _, _, c in p["events"]), default=0.0) for p in read_stamps(run).values())


def did(run: dict) -> list[str]:
    """What each process did: the imports, the sessions it made by provider, its probe, its statistics session."""
    lines = []
    for name, p in sorted(read_stamps(run).items()):
        if name == "tracker":
            continue
        ev = p["events"]
        imported = sorted({w for e, w, _, _ in ev if e == "import-"})
        sessions = [w.split("[")[-1].rstrip("]") for e, w, _, _ in ev if e == "call-" and w.startswith("session.make")]
        ort = sum(1 for e, w, _, _ in ev if e == "call-" and w == "ort.InferenceSession")
        calls = defaultdict(int)
        for e, w, _, _ in ev:
            if e == "call-":
                calls[w] += 1
        notes = [
            f"probe run {calls['model.AttentionModel.probe']}×" if calls["model.AttentionModel.probe"] else "",
            f"light model {calls['light_model.light']}×" if calls["light_model.light"] else "",
            f"kept stats session {calls['light_model.LightModel.stats_session']}×"
            if calls["light_model.LightModel.stats_session"]
            else "",
            f"stats graph {calls['statgraph_kept.stats_model']}× (InGraphReducer.build {calls['graph_reduce.InGraphReducer.build']}×)"
            if calls["statgraph_kept.stats_model"]
            else "",
            f"open_model {calls['folder.open_model']}×" if calls["folder.open_model"] else "",
        ]
        lines.append(
            f"  {name}: imports {', '.join(imported) or 'none watched'}; sessions {sessions or '[]'} "
            f"({ort} onnxruntime sessions); " + "; ".join(n for n in notes if n)
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--provider", default="cpu", choices=("cpu", "cuda", "auto"))
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", type=int, help="attnviz --workers (default: cuda 4, cpu the cores)")
    ap.add_argument("--threads", type=int, help="attnviz --threads (default: cuda cores/4, cpu 1)")
    ap.add_argument("--plain", help="plain's PROCESSESxTHREADS (default 1x<cores>)")
    ap.add_argument("--minilm", metavar="DIR", help="as bench/corpus_bench.py --minilm")
    ap.add_argument("--work", default="/tmp/attnviz_corpus_bench")
    ap.add_argument("--other-root", metavar="DIR", help="also `attnviz corpus` from DIR/attnviz (before/after)")
    ap.add_argument("--no-plain", action="store_true")
    ap.add_argument("--show", action="store_true", help="print every process's raw stamps of the last round")
    a = ap.parse_args()

    cores = os.cpu_count() or 1
    from attnviz.runtime.isolation import gpu_present  # (auto: the GPU's rows where one is present)

    gpu = a.provider == "cuda" or (a.provider == "auto" and gpu_present())
    workers = a.workers or (4 if gpu else cores)
    threads = a.threads or (max(1, cores // 4) if gpu else 1)
    plain = a.plain or f"1x{cores}"
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    model, tok = cb.minilm(work, a.minilm)
    texts = cb.corpus_file(work, a.items)
    hooks = hook_dir(work)
    roots = {"attnviz": ROOT, **({"other": Path(a.other_root).resolve()} if a.other_root else {})}
    for root in roots.values():
        cb.compiled(root)
    base_env = {k: v for k, v in os.environ.items() if k != "ATTNVIZ_TL_DIR"}
    pp = base_env.get("PYTHONPATH", "")
    layout = base_env.get(LAYOUT_ENV, "") or ("threads" if gpu else "processes")

    def corpus_cmd(side: str) -> tuple[list[str], Path, dict]:
        root = roots[side]
        out = work / f"tl_out_{side}"
        shutil.rmtree(out, ignore_errors=True)
        cmd = [sys.executable, "-m", "attnviz", "corpus", str(model), "--texts", str(texts), "--tokenizer", tok]
        cmd += ["--out", str(out), "--engine", "local", "--workers", str(workers), "--threads", str(threads)]
        cmd += ["--provider", a.provider, "--batch-size", str(a.batch), "--no-progress"]
        # the other root's package first (python -m imports from the working folder; spawned workers get sys.path)
        paths = [str(hooks), str(root)] + [p for p in pp.split(os.pathsep) if p and Path(p).resolve() != ROOT]
        env = {**base_env, "PYTHONPATH": os.pathsep.join(paths), "ATTNVIZ_CACHE_DIR": str(work / f"tl_cache_{side}")}
        return cmd, root, env

    def plain_cmd() -> tuple[list[str], Path, dict]:
        code = (
            "import sys; sys.path.insert(0, sys.argv[1]); import corpus_bench as cb; "
            "p, t = (int(v) for v in sys.argv[5].split('x')); "
            "cb.plain_child(sys.argv[2], sys.argv[3], sys.argv[4], p, t, sys.argv[6], int(sys.argv[7]))"
        )
        on = "cuda" if gpu else "cpu"  # (plain as a user writes it for the device: auto's too)
        cmd = [sys.executable, "-c", code, str(BENCH), str(model), tok, str(texts), plain, on, str(a.batch)]
        env = {**base_env, "PYTHONPATH": os.pathsep.join([str(hooks), *[p for p in pp.split(os.pathsep) if p]])}
        return cmd, ROOT, env

    sides = ([] if a.no_plain else ["plain"]) + list(roots)
    print(
        f"timeline: {a.items} items, batch {a.batch}, provider {a.provider}, layout {layout}, attnviz --workers "
        f"{workers} --threads {threads}, plain {plain}, {cores} cores; median of {a.rounds} interleaved rounds",
        flush=True,
    )
    for side in roots:  # each side's cache filled first: every measured command is a second command
        cmd, cwd, env = corpus_cmd(side)
        launch(cmd, cwd, env, work / "tl_stamps_warm")
    got: dict[str, list[dict]] = {s: [] for s in sides}
    walls: dict[str, list[str]] = {s: [] for s in sides}
    cpus: dict[str, list[float]] = {s: [] for s in sides}
    last_runs: dict[str, dict] = {}
    for rnd in range(a.rounds):
        for side in sides:
            cmd, cwd, env = plain_cmd() if side == "plain" else corpus_cmd(side)
            run = launch(cmd, cwd, env, work / f"tl_stamps_{side}")
            got[side].append(phases(run))
            walls[side].append(f"{run['returned']:.2f}")
            cpus[side].append(cpu_total(run))
            last_runs[side] = run
            print(f"  round {rnd}: {side} {run['returned']:.2f} s, load average {os.getloadavg()[0]:.1f}", flush=True)
    names: list[str] = []
    for side in sides:
        for r in got[side]:
            names += [k for k in r if k not in names]
    print(f"\n| phase (s from launch; median of {a.rounds}) | " + " | ".join(sides) + " |")
    print("|---|" + "---:|" * len(sides))
    for k in names:
        cells = []
        for side in sides:
            vals = [r[k] for r in got[side] if r.get(k) is not None]
            cells.append(f"{statistics.median(vals):.3f}" if vals else "–")
        if any(c != "–" for c in cells):
            print(f"| {k} | " + " | ".join(cells) + " |")
    print("\ncommand walls per round (s): " + "; ".join(f"{s} {', '.join(walls[s])}" for s in sides))
    print(
        "CPU of all its processes per round (s): "
        + "; ".join(
            f"{s} {', '.join(f'{c:.2f}' for c in cpus[s])} (median {statistics.median(cpus[s]):.2f})" for s in sides
        )
    )
    meds = {s: statistics.median(r["command returned (pipes closed)"] for r in got[s]) for s in sides}
    if "plain" in meds:
        print("median command vs plain: " + ", ".join(f"{s} {meds['plain'] / meds[s]:.2f}×" for s in sides[1:]))
    if "other" in roots:  # the last round's results of this checkout against the other's
        files = ("heads.parquet", "examples.parquet")
        same = [(work / "tl_out_attnviz" / f).read_bytes() == (work / "tl_out_other" / f).read_bytes() for f in files]
        print(
            "outputs attnviz vs other: " + ("the same bytes " if all(same) else "DIFFER ") + str(dict(zip(files, same)))
        )
    print("\nwhat each process did (last round):")
    for side in sides:
        print(f" {side}:")
        print("\n".join(did(last_runs[side])))
    if a.show:
        for side in sides:
            for name, p in sorted(read_stamps(last_runs[side]).items()):
                print(f"\n{side} {name} (born {p['born']:.3f}): {p['cmd'][:120]}")
                for e, w, t, c in p["events"]:
                    print(f"  {t:8.3f}  cpu {c:6.3f}  {e} {w}")


if __name__ == "__main__":
    main()
