"""``--provider auto`` on a GPU machine when CUDA fails after a command found it (autocuda18): the fallback on real hardware.

    OMP_NUM_THREADS=1 python bench/auto_fallback_check.py --other-root .g9      (on the GPU box, after device_env.sh)

The same MiniLM export and corpus file as bench/corpus_timeline.py (its ``--work`` folder): one ``auto`` command on
CUDA (its worker keeps where auto landed), then ``auto`` with ``CUDA_VISIBLE_DEVICES=`` (the device nodes stay, so
attnviz still sees a GPU, but onnxruntime's CUDA provider finds no device: CUDA unusable since the record), then a
``--provider cpu`` command, and with ``--other-root`` the same ``auto`` without CUDA from another checkout (before:
auto as it was).  Printed: each command's exit status, wall, the lines it wrote to stderr, its run.json's device and
layout, and whether the fallback's heads.parquet and examples.parquet are a ``cpu`` command's (and the other
checkout's) bytes.  Every command takes the device's defaults (workers, threads, layout).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import corpus_bench as cb  # (the model export and corpus file, as the bench makes them)

FILES = ("heads.parquet", "examples.parquet")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--work", default="/tmp/attnviz_corpus_bench")
    ap.add_argument("--minilm", metavar="DIR", help="as bench/corpus_bench.py --minilm")
    ap.add_argument("--other-root", metavar="DIR", help="also the fallback from DIR/attnviz (before)")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    model, tok = cb.minilm(work, a.minilm)
    texts = cb.corpus_file(work, a.items)
    cache = work / "fallback_cache"
    shutil.rmtree(cache, ignore_errors=True)

    def command(name: str, provider: str, root: Path, **env: str) -> Path:
        out = work / f"fallback_{name}"
        shutil.rmtree(out, ignore_errors=True)
        cmd = [sys.executable, "-m", "attnviz", "corpus", str(model), "--texts", str(texts), "--tokenizer", tok]
        cmd += ["--out", str(out), "--provider", provider, "--no-progress"]
        pp = [str(root)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p) != ROOT]
        full = {**os.environ, "PYTHONPATH": os.pathsep.join(pp), "ATTNVIZ_CACHE_DIR": str(cache / root.name), **env}
        t = time.perf_counter()
        got = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=full, check=False)
        wall = time.perf_counter() - t
        err = [ln for ln in got.stderr.splitlines() if ln.strip()]
        run = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
        shown = {k: run.get(k) for k in ("gpu", "workers", "threads_per_worker", "worker_layout")}
        print(f"{name}: rc {got.returncode}, {wall:.2f} s, run.json {shown}, stderr {err[-3:]}", flush=True)
        return out

    def same(x: Path, y: Path) -> str:
        eq = [(x / f).exists() and (x / f).read_bytes() == (y / f).read_bytes() for f in FILES]
        return "the same bytes" if all(eq) else f"DIFFER {dict(zip(FILES, eq))}"

    command("auto_first", "auto", ROOT)  # probes on CUDA, keeps where auto landed
    command("auto_cuda", "auto", ROOT)  # a second command: as cuda (light worker, one CUDA session)
    gone = command("auto_gone", "auto", ROOT, CUDA_VISIBLE_DEVICES="")  # the record says CUDA; CUDA unusable now
    again = command("auto_gone_again", "auto", ROOT, CUDA_VISIBLE_DEVICES="")  # the record forgotten: probes
    cpu = command("cpu", "cpu", ROOT)
    print(f"fallback vs cpu: {same(gone, cpu)}; the next command vs cpu: {same(again, cpu)}")
    if a.other_root:
        other = Path(a.other_root).resolve()
        command("other_auto_first", "auto", other)
        before = command("other_auto_gone", "auto", other, CUDA_VISIBLE_DEVICES="")
        print(f"fallback vs before's fallback: {same(gone, before)}")


if __name__ == "__main__":
    main()
