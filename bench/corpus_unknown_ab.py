"""A/B of `attnviz corpus` before and after a change, as whole commands (session 22, tidy22: the unknown-token
count in the tokenising step), and of the driver's tokenising step alone, in one process per tree.

    OMP_NUM_THREADS=1 python bench/corpus_unknown_ab.py OLD_TREE NEW_TREE MODEL.onnx TOKENIZER.json TEXTS \
        [--rounds 3] [--work DIR]

Whole commands: `python -m attnviz corpus MODEL --tokenizer TOK --texts TEXTS --workers 1 --threads 1` with
PYTHONPATH at each tree, interleaved (the order swapped each round), a shared ATTNVIZ_CACHE_DIR warmed first;
wall and CPU (user + system of the command and its children) per run.  Tokenising step: each tree's
``attnviz.corpus.plan.encode_items`` on the corpus, best of 7 CPU times (process_time), in a fresh process per tree,
the trees alternated."""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

STEP = """
import sys, time
from attnviz.runtime import open_model
from attnviz.corpus import items as it
from attnviz.corpus.plan import encode_items
m = open_model(sys.argv[1], provider="cpu", tokenizer=sys.argv[2])
items = it.read_texts(sys.argv[3], None, None)
best = 1e9
for _ in range(7):
    t = time.process_time()
    enc = encode_items(m, items)
    best = min(best, time.process_time() - t)
print(best, len(enc.ids), getattr(enc, "mostly_unknown", "-"))
"""


def command(tree: str, model: str, tok: str, texts: str, out: Path, cache: Path) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": tree, "ATTNVIZ_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1"}
    args = [sys.executable, "-m", "attnviz", "corpus", model, "--tokenizer", tok, "--texts", texts]
    args += ["--out", str(out), "--workers", "1", "--threads", "1", "--no-progress"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(args, env=env, check=True, capture_output=True, cwd=tree)  # (cwd: first on sys.path)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("model")
    ap.add_argument("tokenizer")
    ap.add_argument("texts")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default="/tmp/attnviz_unknown_ab")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    trees = {"old": a.old, "new": a.new}
    for name, tree in trees.items():  # the step alone, alternated
        for _ in range(2):
            env = {**os.environ, "PYTHONPATH": tree, "OMP_NUM_THREADS": "1"}
            r = subprocess.run(
                [sys.executable, "-c", STEP, a.model, a.tokenizer, a.texts],
                env=env,
                cwd=tree,  # python -c puts the working folder first on sys.path
                check=True,
                capture_output=True,
                text=True,
            )
            print(f"tokenising step {name}: best CPU s, tokens, mostly unknown: {r.stdout.strip()}", flush=True)
    command(a.new, a.model, a.tokenizer, a.texts, work / "warm", work / "cache")  # the cache warmed
    runs: dict[str, list[tuple[float, float]]] = {"old": [], "new": []}
    for r in range(a.rounds):
        for name in ("old", "new") if r % 2 == 0 else ("new", "old"):
            runs[name].append(command(trees[name], a.model, a.tokenizer, a.texts, work / f"{name}_{r}", work / "cache"))
            w, c = runs[name][-1]
            print(f"{name} {r}: wall {w:.2f} s, CPU {c:.2f} s, load {os.getloadavg()}", flush=True)
    for name, v in runs.items():
        print(
            f"{name}: best wall {min(w for w, _ in v):.2f} s, best CPU {min(c for _, c in v):.2f} s, "
            f"all {[(round(w, 2), round(c, 2)) for w, c in v]}"
        )
    ow, oc = min(w for w, _ in runs["old"]), min(c for _, c in runs["old"])
    nw, nc = min(w for w, _ in runs["new"]), min(c for _, c in runs["new"])
    print(f"new / old: wall {nw / ow:.3f}, CPU {nc / oc:.3f}")


if __name__ == "__main__":
    main()
