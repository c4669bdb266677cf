"""``attnviz compare A B``: two models against one model's run (issue 27: target ≤ 2.1×, two runs and a reduction).

    python bench/compare_bench.py [--items 200] [--rounds 3] [--threads 2] [--quantized] [--tokens 32 128]

Model A: the real all-MiniLM-L6-v2 (6 layers × 12 heads, exported once as bench/corpus_bench.py does); B: a byte
copy of it (both runs then cost the same: the ratio is of the command, not of two models' speeds), or with
``--quantized`` its onnxruntime ``quantize_dynamic`` int8 copy (the use case; int8 runs at its own speed).

Table 1, a corpus (``--items`` README/docs sentences, bench/corpus_bench.py's corpus): whole commands, each a fresh
process, interleaved over ``--rounds`` rounds with the order rotated; one worker × ``--threads`` threads everywhere:
  - plain onnxruntime: the same length-sorted padded batches through one plain session (no attention outputs);
  - ``attnviz corpus A`` (one model: statistics inside the graph, Parquet written);
  - ``attnviz compare A B --texts`` (both models' maps, reduced per batch in the worker).
Wall seconds (best of the rounds) and CPU seconds (user + system of the command and every process it waited for:
its workers; medians), and compare's ratio to each.
Table 2, in one process, interleaved, wall and CPU (of this process's threads: robust to other load):
  - one input, medians after a warm-up: one model's ``analyze_request`` (its maps, dense) against the compare's
    work (both models' ``analyze_request`` and ``compare_results``);
  - the corpus's padded batches (32 items): a plain session (outputs only), one model's corpus worker
    (``BatchReducer``, statistics inside the graph) and the compare worker (``PairReducer``: both models' maps,
    reduced); totals per round after a warm-up round.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))


def command(argv: list[str], out: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one fresh attnviz command writing to ``out`` (emptied first)."""
    from corpus_bench import _children_cpu

    shutil.rmtree(out, ignore_errors=True)
    c0, t0 = _children_cpu(), time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "attnviz.cli", *argv, "--out", str(out), "--no-progress"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if p.returncode != 0:
        raise SystemExit(p.stderr[-2000:])
    return wall, cpu


def corpus_table(a: Path, b: Path, tok: str, texts: Path, rounds: int, threads: int, work: Path) -> list[dict]:
    from corpus_bench import plain_command

    pool = ["--workers", "1", "--threads", str(threads), "--tokenizer", tok, "--provider", "cpu"]
    runs = {
        "plain onnxruntime (one model)": lambda: (lambda r: (r["wall_s"], r["cpu_s"]))(
            plain_command(a, tok, texts, 1, threads, "cpu", 32)
        ),
        "attnviz corpus A": lambda: command(["corpus", str(a), "--texts", str(texts), *pool], work / "corpus"),
        "attnviz compare A B --texts": lambda: command(
            ["compare", str(a), str(b), "--texts", str(texts), *pool], work / "compare"
        ),
    }
    names = list(runs)
    got: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for n in order:
            got[n].append(runs[n]())
            print(f"  round {r} {n}: {got[n][-1][0]:.1f} s wall, {got[n][-1][1]:.1f} s CPU", flush=True)
    return [
        {"what": n, "wall": min(w for w, _ in got[n]), "cpu": statistics.median(c for _, c in got[n])} for n in names
    ]


def single_table(a: Path, b: Path, tok: str, texts: Path, tokens: list[int], rounds: int, threads: int) -> list[dict]:
    import dataclasses

    from attnviz.corpus.compare import compare_results
    from attnviz.runtime import open_model
    from attnviz.runtime.request import AnalyzeRequest

    words = texts.read_text().split()
    ma = open_model(a, provider="cpu", tokenizer=tok, threads=threads)
    mb = open_model(b, provider="cpu", tokenizer=tok, threads=threads)
    rows = []
    for n in tokens:
        text = " ".join(words[: n - 2])  # about n tokens with [CLS] / [SEP]
        req = dataclasses.replace(AnalyzeRequest(text=text, max_tokens=n), mode="dense")
        got: dict[str, list[tuple[float, float]]] = {"one": [], "compare": []}
        for r in range(rounds + 1):
            with clock(got["one"], r):
                ma.analyze_request(req)
            with clock(got["compare"], r):
                compare_results(ma.analyze_request(req), mb.analyze_request(req))
        rows.append({"what": f"{n} tokens", **medians(got)})
    return rows


class clock:
    """Appends (wall, CPU of this process and its threads) seconds of the block to ``into`` unless round 0."""

    def __init__(self, into: list, r: int):
        self.into, self.r = into, r

    def __enter__(self):
        self.t = (time.perf_counter(), time.process_time())

    def __exit__(self, *exc):
        if self.r:  # the first round warms up
            self.into.append((time.perf_counter() - self.t[0], time.process_time() - self.t[1]))


def medians(got: dict) -> dict:
    return {k: tuple(statistics.median(x[i] for x in v) * 1e3 for i in (0, 1)) for k, v in got.items()}


def batch_table(a: Path, b: Path, tok: str, texts: Path, rounds: int, threads: int) -> list[dict]:
    """Per padded batch (32 items, the corpus's own plan), in this process: a plain session (outputs only), one
    model's corpus worker (``BatchReducer``: statistics in the graph) and the compare worker (``PairReducer``)."""
    from corpus_bench import _plain_session

    from attnviz.corpus.compare_reduce import CompareSetup, CompareTask
    from attnviz.corpus.compare_run import match_sites
    from attnviz.corpus.items import read_texts
    from attnviz.corpus.plan import encode_items, plan_text, text_feeds
    from attnviz.corpus.reduce import BatchReducer
    from attnviz.runtime import open_model

    ma, mb = (open_model(p, provider="cpu", tokenizer=tok) for p in (a, b))
    ma.probe()
    mb.probe()
    matched, _ = match_sites(ma.sites, mb.sites)
    outs = tuple(o.name for o in ma.outputs)
    items = read_texts(texts)
    specs = plan_text(items, encode_items(ma, items), None, None, 32, equal_lengths=False)
    plain = _plain_session(str(a), threads, "cpu")
    one = BatchReducer(str(a), "cpu", tok, threads, 5)
    pair = CompareSetup(str(a), str(b), "cpu", tok, threads, 1, tuple(matched), outs).reducer()
    got: dict[str, list[tuple[float, float]]] = {"plain": [], "one": [], "compare": []}
    for r in range(rounds + 1):
        for spec in specs:
            feeds = text_feeds(ma, spec)[0]
            with clock(got["plain"], r):
                plain.run(None, feeds)
            with clock(got["one"], r):
                one(spec)
            with clock(got["compare"], r):
                pair(CompareTask(spec.batch_id, spec))
    sums = {k: (sum(w for w, _ in v) / rounds, sum(c for _, c in v) / rounds) for k, v in got.items()}
    return [{"what": f"{len(specs)} batches, all", **{k: (w * 1e3, c * 1e3) for k, (w, c) in sums.items()}}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--single-rounds", type=int, default=20)
    ap.add_argument("--batch-rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--tokens", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--quantized", action="store_true", help="B: A's quantize_dynamic int8 copy (default: a copy)")
    ap.add_argument("--work", default="/tmp/attnviz_corpus_bench")
    a = ap.parse_args()
    os.environ["ATTNVIZ_INPROCESS"] = "1"  # table 2 in this process; the commands isolate as they always do
    from corpus_bench import corpus_file, minilm

    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    model, tok = minilm(work)
    other = work / ("minilm_int8.onnx" if a.quantized else "minilm_copy.onnx")
    if not other.exists():
        if a.quantized:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            quantize_dynamic(str(model), str(other), weight_type=QuantType.QInt8)
        else:
            shutil.copyfile(model, other)
    texts = corpus_file(work, a.items)
    print(f"load average at start: {os.getloadavg()}", flush=True)
    rows = corpus_table(model, other, tok, texts, a.rounds, a.threads, work / "compare_bench")
    single = single_table(model, other, tok, texts, a.tokens, a.single_rounds, a.threads)
    batches = batch_table(model, other, tok, texts, a.batch_rounds, a.threads)
    print(f"load average at end: {os.getloadavg()}")
    b = "its int8 copy" if a.quantized else "a byte copy"
    print(f"\nCorpus of {a.items} items, MiniLM A vs {b}, 1 worker × {a.threads} threads, {a.rounds} rounds")
    cmp = rows[-1]
    print("| command | wall (best) | CPU (median) | compare / this, wall | compare / this, CPU |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['what']} | {r['wall']:.1f} s | {r['cpu']:.1f} s | {cmp['wall'] / r['wall']:.2f}× | "
            f"{cmp['cpu'] / r['cpu']:.2f}× |"
        )
    print(
        f"\nIn process, interleaved: one input ({a.single_rounds} rounds, medians) and the corpus's batches "
        f"({a.batch_rounds} rounds after a warm-up, totals per round); ms wall / ms CPU (this process's threads)"
    )
    print(
        "| input | plain session | one model | compare | compare / one model (wall, CPU) | compare / plain (wall, CPU) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for r in [*single, *batches]:
        pl = r.get("plain")
        cells = [
            f"{pl[0]:.1f} / {pl[1]:.1f}" if pl else "–",
            *(f"{r[k][0]:.1f} / {r[k][1]:.1f}" for k in ("one", "compare")),
        ]
        ratio = lambda x: f"{r['compare'][0] / x[0]:.2f}×, {r['compare'][1] / x[1]:.2f}×"  # noqa: E731
        print(f"| {r['what']} | {' | '.join(cells)} | {ratio(r['one'])} | {ratio(pl) if pl else '–'} |")


if __name__ == "__main__":
    main()
