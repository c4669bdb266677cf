"""What gold alignments cost a corpus run: `attnviz corpus --gold-column` against the same run without it.

    OMP_NUM_THREADS=1 python bench/gold_bench.py [--items 300] [--rounds 5] [--workers 1]

Model: the translation demo (models/translation.onnx, 3 + 3 layers × 4 heads).  Corpus: the first --items
held-out Greek → English New Testament verses of `bible-alignments` (the demo's own test data), words joined
by spaces, with their gold links as Pharaoh lines (jsonl: text, en, gold).  Each round runs both commands as
fresh processes, alternately (`python -m attnviz corpus ... --workers W --threads 1`), so both see the same
load; the table prints each one's median wall and CPU (user + system of the command and its workers) and the
median of the per-round ratios (paired).  Without gold the items are encoded as raw text; with gold, word by
word (so that gold word indices address the maps): the difference includes that too.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "translation.onnx"


def corpus_file(n: int, folder: Path) -> Path:
    sys.path.insert(0, str(ROOT))
    from attnviz.training import data_translation as dt

    pairs = dt.split_pairs(dt.load_bible()).test[:n]
    f = folder / "pairs.jsonl"
    with f.open("w") as out:
        for p in pairs:
            gold = " ".join(f"{i}-{j}" for i, j in sorted(p.links))
            out.write(json.dumps({"text": " ".join(p.src), "en": " ".join(p.tgt), "gold": gold}) + "\n")
    return f


def run_once(texts: Path, out: Path, gold: bool, workers: int) -> tuple[float, float]:
    """(wall, CPU) seconds of one whole command, its workers included."""
    args = [sys.executable, "-m", "attnviz", "corpus", str(MODEL), "--texts", str(texts), "--text-pair-column", "en"]
    args += ["--gold-column", "gold"] if gold else []
    args += ["--out", str(out), "--no-progress", "--workers", str(workers), "--threads", "1"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(args, check=True, cwd=ROOT, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="attnviz-gold-bench-") as tmp:
        folder = Path(tmp)
        texts = corpus_file(a.items, folder)
        run_once(texts, folder / "warm", True, a.workers)  # page cache, compiled bytecode
        rows: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for r in range(a.rounds):
            for gold in (False, True) if r % 2 == 0 else (True, False):
                out = folder / f"o{r}{gold}"
                rows[gold].append(run_once(texts, out, gold, a.workers))
        run = json.loads((folder / f"o0{True}" / "run.json").read_text())["gold"]
    print(f"translation demo, {a.items} verses, {a.rounds} rounds, {a.workers} worker(s) × 1 thread")
    print(f"gold: {run['pairs']} pairs, {run['sure_links']} sure links, best head {run['best_head']}")
    print("| command | wall (median) | CPU (median) |")
    print("|---|---:|---:|")
    for gold in (False, True):
        w = statistics.median(x[0] for x in rows[gold])
        c = statistics.median(x[1] for x in rows[gold])
        print(f"| corpus{' --gold-column' if gold else ''} | {w:.2f} s | {c:.2f} s |")
    wall = statistics.median(g[0] / p[0] for g, p in zip(rows[True], rows[False]))
    cpu = statistics.median(g[1] / p[1] for g, p in zip(rows[True], rows[False]))
    print(f"with gold / without, paired median: wall {wall:.3f}x, CPU {cpu:.3f}x")


if __name__ == "__main__":
    main()
