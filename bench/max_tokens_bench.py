"""What ``--max-tokens`` costs the driver's tokenisation (session 17, maxtok17): 10,000 sentence pairs of 20-59
words a side through ``plan.encode_items`` (a word-level tokenizer.json, BERT pair template), not cut, every pair
cut (N = 32: longest first, corpus/cut.py), and N = 512 (nothing to cut), interleaved rounds, medians.

    OMP_NUM_THREADS=1 RAYON_NUM_THREADS=1 PYTHONPATH=$PWD python bench/max_tokens_bench.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from attnviz.corpus import plan
from attnviz.corpus.items import Item
from attnviz.runtime.inputs import HFTokenizer


def main(n_items: int = 10_000, rounds: int = 5) -> None:
    words = [f"w{i}" for i in range(500)]
    t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *words])}, "[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    t.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    path = Path(tempfile.mkdtemp()) / "tokenizer.json"
    t.save(str(path))
    model = SimpleNamespace(tokenizers=(HFTokenizer.from_file(path), None), kind="encoder", path=path, meta={})
    model.position_limit = None
    rng = np.random.default_rng(0)
    items = [
        Item(i, " ".join(rng.choice(words, rng.integers(20, 60))), " ".join(rng.choice(words, rng.integers(20, 60))))
        for i in range(n_items)
    ]
    res: dict[str, list] = {"not cut": [], "N=32 (all cut)": [], "N=512 (none cut)": []}
    for _ in range(rounds):
        for k, n in zip(res, (None, 32, 512)):
            w, c = time.perf_counter(), time.process_time()
            enc = plan.encode_items(model, items, max_tokens=n)
            res[k].append((time.perf_counter() - w, time.process_time() - c, len(enc.cuts)))
    for k, v in res.items():
        a = np.array(v)
        print(f"{k:18s} wall {np.median(a[:, 0]):.3f} s  cpu {np.median(a[:, 1]):.3f} s  items cut {int(a[0, 2])}")


if __name__ == "__main__":
    main()
