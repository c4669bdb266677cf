"""Reading a --texts corpus: .tsv / .csv (corpus/delimited.py, Python's csv) against the same records as .jsonl.

    OMP_NUM_THREADS=1 python bench/delimited_read_bench.py [--items 200000] [--rounds 3]

One process; the three files hold the same records (and a .txt their texts alone) (a text of 5-40 words and a 20-word pair, commas among the
words, so the CSV quotes some fields); each round reads each file once through ``items.read_texts(path, "en")``, the
order fixed, rounds interleaved; best wall and best CPU (process time) per format, and each's ratio to .jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

from attnviz.corpus.items import read_texts

WORDS = "the cat sat on a mat , and the dog ran home".split()


def _files(d: Path, n: int) -> list[Path]:
    rng = random.Random(0)
    recs = [
        {"text": " ".join(rng.choices(WORDS, k=rng.randint(5, 40))), "en": " ".join(rng.choices(WORDS, k=20))}
        for _ in range(n)
    ]
    quote = lambda v: f'"{v}"' if "," in v else v  # noqa: E731 (no quote in WORDS)
    (d / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (d / "c.tsv").write_text("text\ten\n" + "".join(f"{r['text']}\t{r['en']}\n" for r in recs))
    (d / "c.csv").write_text("text,en\n" + "".join(f"{quote(r['text'])},{quote(r['en'])}\n" for r in recs))
    (d / "c.txt").write_text("".join(f"{r['text']}\n" for r in recs))  # the texts alone
    return [d / "c.jsonl", d / "c.tsv", d / "c.csv", d / "c.txt"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = _files(Path(tmp), args.items)
        times: dict[Path, list[tuple[float, float]]] = {f: [] for f in files}
        for _ in range(args.rounds):
            for f in files:
                t0, c0 = time.perf_counter(), time.process_time()
                assert len(read_texts(f, None if f.suffix == ".txt" else "en")) == args.items
                times[f].append((time.perf_counter() - t0, time.process_time() - c0))
        base = min(c for _, c in times[files[0]])
        for f, v in times.items():
            wall, cpu = min(w for w, _ in v), min(c for _, c in v)
            size = os.path.getsize(f) / 2**20
            print(
                f"{f.suffix:7} {size:5.1f} MiB  best wall {wall:.2f} s  best CPU {cpu:.2f} s  CPU/.jsonl {cpu / base:.2f}"
            )
    print("load average", " / ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
