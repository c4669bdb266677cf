"""The driver's peak memory of ``attnviz corpus --engine ray`` over a .tsv, this checkout against an older commit.

    OMP_NUM_THREADS=1 python bench/ray_delimited_memory.py [--items 200000] [--base 92fa0aa] [--rounds 2]

Session 19 read a .tsv / .csv whole in the driver (the local reader, then ``ray.data.from_arrow``); session 20 reads
it in a Ray read task with the same reader and only checks it, streamed, in the driver.  Each row is a fresh
process running ``attnviz corpus`` (the planted test encoder of tests/corpus/planted.py, its 9-word vocabulary; a
text of 1-12 words, a pair of 1-7 and a free-text note with commas and quotes, a few quoted over two lines, per
record) in-process with ``--engine ray --workers 1 --threads 1``; it reports its own peak resident set (VmHWM:
Ray's raylet, GCS and workers are other processes), wall and CPU time.  The two codes run alternately, ``--rounds``
times each; the older one is ``git archive``-d from ``--base`` into a temporary folder.  Both results' heads and
examples are compared byte for byte.  First, each code's read stage alone (what the driver does with the file
before Ray starts) in a fresh process: its peak resident set above the one after the imports.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import os, resource, sys, time
sys.path.insert(0, sys.argv[1])
from attnviz.cli import main
t, c = time.perf_counter(), time.process_time()
rc = main(["corpus", sys.argv[2], "--texts", sys.argv[3], "--out", sys.argv[4], "--engine", "ray", "--workers", "1",
           "--threads", "1", "--no-progress", "--batch-size", "64", "--text-pair-column", "b"])
wall, cpu = time.perf_counter() - t, time.process_time() - c
hwm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM"))
import attnviz
print("RESULT", rc, hwm, wall, cpu, attnviz.__file__, flush=True)
"""

# the driver's read of the file alone, before Ray starts (session 19: the local reader's whole table, kept until the
# run's end; session 20: the streamed check): its peak above the process's resident set after the imports
READ = r"""
import sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
import attnviz.corpus.ray_engine as re, pyarrow, ray.data
rss = lambda key: next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith(key))
before = rss("VmRSS")
if hasattr(re, "_read_delimited"):
    kept = re._read_delimited(re.TextJob(sys.argv[2], "b", None, 64, False, 4, False, b""))
else:
    re._check_rows(Path(sys.argv[2]), "b")
print("READ", (rss("VmHWM") - before) / 1024, re.__file__, flush=True)
"""


def read_stage(code: Path, texts: Path) -> float:
    p = subprocess.run(
        [sys.executable, "-c", READ, str(code), str(texts)],
        capture_output=True,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(code)),
    )
    line = next((x for x in p.stdout.splitlines() if x.startswith("READ")), None)
    if line is None or not line.split()[2].startswith(str(code)):
        sys.exit(f"read stage: {line}\n{p.stderr[-2000:]}")
    return float(line.split()[1])


def corpus(path: Path, n: int) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "corpus"))
    from planted import corpus_lines

    texts, pairs = corpus_lines(n, seed=1), corpus_lines(n, seed=2)
    with path.open("w", newline="") as f:
        f.write("text\tb\tnote\n")
        for k, (t, p) in enumerate(zip(texts, pairs)):
            note = f'"say ""hi"", {k}\nthen bye"' if k % 50 == 0 else f"note {k}, plain"
            # [CLS] text [SEP] pair [SEP] within the model's 24 positions
            f.write(f"{' '.join(t.split()[:12])}\t{' '.join(p.split()[:7])}\t{note}\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=200_000)
    ap.add_argument("--base", default="92fa0aa")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--read-only", action="store_true", help="only the driver's read stage, no corpus run")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "corpus"))
    from planted import planted_model

    with tempfile.TemporaryDirectory(prefix="raymem-") as tmp:
        d = Path(tmp)
        base = d / "base"
        base.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.base, "attnviz"], capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
        model = planted_model(d / "planted.onnx")
        texts = d / "c.tsv"
        corpus(texts, args.items)
        print(f"{args.items} records, {texts.stat().st_size / 2**20:.1f} MiB; load {os.getloadavg()}", flush=True)
        codes = {"base": base, "this": ROOT}
        for r in range(args.rounds):
            for name, code in codes.items() if r % 2 == 0 else reversed(codes.items()):
                print(
                    f"read stage {name}: the driver's peak {read_stage(code, texts):.1f} MiB above its imports; "
                    f"load {os.getloadavg()}",
                    flush=True,
                )
        if args.read_only:
            return
        got: dict[str, list] = {k: [] for k in codes}
        for r in range(args.rounds):
            for name, code in codes.items() if r % 2 == 0 else reversed(codes.items()):
                out = d / f"{name}{r}"
                p = subprocess.run(
                    [sys.executable, "-c", CHILD, str(code), str(model), str(texts), str(out)],
                    capture_output=True,
                    text=True,
                    env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(code)),  # Ray's workers import it too
                    cwd=tmp,
                )
                line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT")), None)
                if line is None:
                    sys.exit(f"{name}: no result\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
                _, rc, hwm, wall, cpu, where = line.split()
                assert rc == "0" and where.startswith(str(code)), (line, p.stderr[-2000:])
                got[name].append((int(hwm) / 1024, float(wall), float(cpu)))
                print(
                    f"round {r} {name}: driver peak {int(hwm) / 1024:.0f} MiB, wall {float(wall):.1f} s, "
                    f"driver CPU {float(cpu):.1f} s; load {os.getloadavg()}",
                    flush=True,
                )
        same = all(
            (d / "base0" / n).read_bytes() == (d / "this0" / n).read_bytes()
            for n in ("heads.parquet", "examples.parquet")
        )
        for name, rows in got.items():
            print(
                f"{name}: driver peak min {min(r[0] for r in rows):.0f} / max {max(r[0] for r in rows):.0f} MiB, "
                f"best wall {min(r[1] for r in rows):.1f} s, best driver CPU {min(r[2] for r in rows):.1f} s"
            )
        print("heads/examples bytes equal between the two codes:", same)
        print(json.dumps(got))


if __name__ == "__main__":
    main()
