"""Where an ``attnviz corpus --engine ray`` run's time goes (session 23, ray23).

    OMP_NUM_THREADS=1 python bench/ray_startup_bench.py [--model planted|minilm] [--items 40] [--rounds 3]
                                                         [--workers 1] [--engines local ray ray@/tmp/base]

Each round runs each engine as a fresh ``python -m attnviz corpus`` process (interleaved), as a user does.  In the
Ray one the driver's phases are timed from inside (the bench wraps ray_engine's functions before calling the CLI):
imports to the start of Ray, ``ray.init``, the read + index pass (``_with_index``: Ray Data's read, blank-row drop
and the index), tokenise + sort + repartition (materialised), the reduce and write (the actor pool), the fold,
and the time from the CLI's return to the process's exit (Ray's shutdown at exit).  Each actor reports (a
subclass of ``ReduceActor`` pickled by value) when its process started, how long its ``__init__`` (the model
opened) took and how many batches / calls it ran.  CPU: the command's user + system seconds and its waited-for
children's (Ray's daemons and workers where the driver reaps them).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))


def child(args: list[str], report: str) -> None:
    """The CLI in this process, ray_engine's phases timed."""
    t0 = time.monotonic()
    from attnviz.corpus import ray_engine

    phases: dict[str, float] = {}
    actors_dir = Path(report + ".actors")
    shutil.rmtree(actors_dir, ignore_errors=True)  # a previous run's records
    actors_dir.mkdir()

    def timed(name, fn):
        def wrap(*a, **kw):
            t = time.monotonic()
            phases.setdefault(f"{name}_start", t - t0)
            try:
                return fn(*a, **kw)
            finally:
                phases[name] = phases.get(name, 0.0) + time.monotonic() - t

        return wrap

    def timed_gen(name, fn):
        def wrap(*a, **kw):
            t = time.monotonic()
            phases.setdefault(f"{name}_start", t - t0)
            out = fn(*a, **kw)
            phases[name] = phases.get(name, 0.0) + time.monotonic() - t
            yield from out
            phases[f"{name}_end"] = time.monotonic() - t0

        return wrap

    base = ray_engine.ReduceActor

    class TimedActor(base):  # pickled by value (this module is __main__): each actor writes its own record
        def __init__(self, *a, **kw):
            import psutil

            self._rec = {"pid": os.getpid(), "proc_start": psutil.Process().create_time(), "init_start": time.time()}
            super().__init__(*a, **kw)
            self._rec["init_s"] = time.time() - self._rec["init_start"]
            self._rec.update(calls=0, call_s=0.0)

        def __call__(self, batch):
            t = time.time()
            try:
                return super().__call__(batch)
            finally:
                self._rec["calls"] += 1
                self._rec["call_s"] += time.time() - t
                (actors_dir / f"{os.getpid()}.json").write_text(json.dumps(self._rec))

    ray_engine.ReduceActor = TimedActor
    ray_engine._init = timed("ray_init", ray_engine._init)
    ray_engine._with_index = timed("read_index", ray_engine._with_index)
    ray_engine._reduce_and_write = timed("reduce_write", ray_engine._reduce_and_write)
    ray_engine._keys = timed("keys", ray_engine._keys)
    ray_engine._fold = timed_gen("fold", ray_engine._fold)
    from attnviz.cli import main

    phases["imports"] = time.monotonic() - t0
    rc = main(args)
    phases["main"] = time.monotonic() - t0
    actors = [json.loads(f.read_text()) for f in actors_dir.glob("*.json")]
    Path(report).write_text(json.dumps({"rc": rc, "phases": phases, "actors": actors, "t0_wall": time.time()}))
    sys.stdout.flush()
    os._exit(rc) if os.environ.get("RAY23_EXIT_NOW") else sys.exit(rc)


def one(row: str, model: Path, tok: str, texts: Path, workers: int, work: Path, n: int) -> dict:
    """``row``: an engine, or ``ENGINE@DIR`` for that engine with the attnviz under DIR (e.g. a ``git archive`` of
    the commit before a change: the before and after rows interleaved in one run)."""
    engine, _, code = row.partition("@")
    tag = f"{engine}{abs(hash(code)) % 10**6 if code else ''}"
    out = work / f"out_{tag}_{n}"
    report = str(work / f"report_{tag}_{n}.json")
    source = "--images" if texts.is_dir() else "--texts"  # (--model vit: a folder of images)
    args = ["corpus", str(model), source, str(texts), "--out", str(out), "--engine", engine, "--no-progress"]
    args += ["--workers", str(workers), "--threads", "1", "--provider", "cpu"] + (["--tokenizer", tok] if tok else [])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=code or str(ROOT))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    cmd = [sys.executable, __file__, "--child", report, "--", *args]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t
    end = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if r.returncode != 0:
        raise SystemExit(f"{engine}: rc {r.returncode}\n{r.stderr[-3000:]}")
    rep = json.loads(Path(report).read_text())
    rep.update(wall=wall, cpu=cpu, exit_after_main=end - rep["t0_wall"], out=str(out))
    return rep


def main() -> None:
    if "--child" in sys.argv:
        i = sys.argv.index("--child")
        child(sys.argv[i + 3 :], sys.argv[i + 1])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=("planted", "minilm", "vit"), default="planted")  # vit: --images
    ap.add_argument("--items", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--engines", nargs="+", default=["local", "ray"])
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    import corpus_bench as cb

    work = Path(a.work or tempfile.mkdtemp(prefix="ray23-"))
    work.mkdir(parents=True, exist_ok=True)
    if a.model == "planted":
        model, tok = cb.planted(work)
        texts = cb.planted_corpus(work, a.items)
    elif a.model == "vit":  # the shipped ViT over a folder of random 40x40 images (session 24: --images' sort)
        import numpy as np
        from PIL import Image

        model, tok = ROOT / "models" / "vit-classification.onnx", ""
        texts = work / f"images_{a.items}"
        texts.mkdir(exist_ok=True)
        rng = np.random.default_rng(0)
        for i in range(a.items):
            Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(texts / f"{i:05d}.png")
    else:
        model, tok = cb.minilm(work)
        texts = cb.corpus_file(work, a.items)
    rows: dict[str, list[dict]] = {e: [] for e in a.engines}
    for n in range(a.rounds):
        for e in a.engines:
            rows[e].append(one(e, model, tok, texts, a.workers, work, n))
    print(f"model {a.model}, {a.items} items, {a.workers} worker(s) x 1 thread, load {os.getloadavg()}")
    for e, rs in rows.items():
        best = min(rs, key=lambda r: r["wall"])
        walls = ", ".join(f"{r['wall']:.2f}" for r in rs)
        print(f"{e} wall best {best['wall']:.2f} s (rounds {walls}); CPU {best['cpu']:.2f} s")
        cpus = ", ".join(f"{r['cpu']:.2f}" for r in rs)
        print(f"   CPU rounds {cpus}")
        if e.startswith("ray"):
            ph = best["phases"]
            if "read_index_start" in ph:  # (the text path's; --images indexes in its sort task since session 24)
                ph["sort"] = ph["reduce_write_start"] - ph["read_index_start"] - ph["read_index"]
            keys = ("imports", "ray_init", "read_index", "sort", "reduce_write", "keys", "fold", "main")
            print("   " + ", ".join(f"{k} {ph[k]:.2f}" for k in keys if k in ph), f"exit {best['exit_after_main']:.2f}")
            if "ray_init_start" in ph and "read_index_start" in ph and "reduce_write_start" in ph:
                print(f"   read_index_start {ph['read_index_start']:.2f}, reduce_start {ph['reduce_write_start']:.2f}")
            for ac in best["actors"]:
                lag = ac["init_start"] - ac["proc_start"]
                print(
                    f"   actor {ac['pid']}: process up {lag:.2f} s before __init__, __init__ {ac['init_s']:.2f} s, "
                    f"{ac['calls']} calls {ac['call_s']:.2f} s"
                )
    outs = {e: Path(rows[e][-1]["out"]) for e in rows}
    for e in outs:
        if e != "local" and "local" in outs:
            for name in ("heads.parquet", "examples.parquet"):
                same = (outs["local"] / name).read_bytes() == (outs[e] / name).read_bytes()
                print(f"{name}: {e} {'==' if same else '!='} local bytes")


if __name__ == "__main__":
    main()
