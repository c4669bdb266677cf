"""The host CPU of one corpus batch outside onnxruntime, part by part, old code against new (issue 26: on a GPU the
worker's loop is capped by this work under the GIL, bench/gpu/corpus_gil.py).

Batches of MiniLM (bench/corpus_bench.py's model and corpus, batches of 32 as a worker plans them) are run through
the statistics session ONCE, here, and what each run returned is kept (a pickle under /tmp/attnviz_corpus_bench);
then child processes, each importing one copy of attnviz (``--old DIR``: e.g. ``git archive 9077fb9 attnviz | tar
-x -C DIR``; the new one: this worktree), time each part on those same batches, rounds interleaved (old, new, new,
old, ...), the median round reported:

- ``stat_feeds``: runtime/statfeeds.py's extra inputs of a batch (in the run's thread);
- ``stat_feeds again``: the same batch's feeds a second time (session 24 keeps the last batches': half of a 10k
  corpus's batches repeat the one before);
- ``wrapper``: what the loop calls on the statistics session (ExtraSession.run_small where the tree has it, else
  ExtraSession.run: the memory check, then onnxruntime's plain run or a binding) on a real onnxruntime session of a
  null graph (the batch's kept outputs sliced from constants: next to no compute), fed the tree's own
  statistics feeds; ``wrapper pinned``: the CUDA path's PinnedOutputs (page-locking replaced by a no-op pinner);
  (before session 24 both were timed on a Python stand-in for the session: its Python only);
- ``finish``: InGraphReducer.finish (incl. statfeeds.item_stats); ``fold``: corpus/fold.py fold_items on its parts;
- ``tail``: what the worker's loop (BatchReducer.many) does after a run: the old code finish then fold_items, the
  new one InGraphReducer.partial (the same fold on the session's joined outputs, keys completed where chosen);
- ``host``: stat_feeds + wrapper + tail, wall and process CPU time (what bench/gpu/corpus_gil.py's ``many`` loop
  does on the host besides the feeds); ``combine``: the worker's task of these batches made one partial
  (reduce.combine, once a task, per batch here), and the host part with it.

Each pass takes the batches in order and each batch's parts one after the other (what one part frees and
allocates sets the next one's cost), best of ``--reps`` passes a part; CPU-bound, one thread.

    OMP_NUM_THREADS=1 python bench/corpus_host_cost.py --old /tmp/fold23_old [--items 2000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pickle
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = Path("/tmp/attnviz_corpus_bench")
PARTS = ("stat_feeds", "stat_feeds again", "wrapper", "wrapper pinned", "finish", "fold", "tail")
HOST = ("stat_feeds", "wrapper", "tail")  # what a worker does per batch besides the run and the feeds


def capture(items: int, every: int) -> Path:
    """Every ``every``-th batch of the planned corpus run once through the statistics session: what the timing needs."""
    from attnviz.core.stats import ROW_STATS  # (a capture of fewer statistics is another file: sink_share made 11)
    from attnviz.runtime import statfeeds

    # (a session that ranks in the graph, session 25's RANKS, is another file: the old captures lack its output)
    ranks = "_r" if hasattr(statfeeds, "RANKS") else ""
    out = WORK / f"host_cost_{items}_{every}_s{len(ROW_STATS)}{ranks}.pkl"
    if out.exists():
        return out
    os.environ["ATTNVIZ_INPROCESS"] = "1"
    sys.path.insert(0, str(ROOT / "bench"))
    sys.path.insert(0, str(ROOT))
    import corpus_bench as cb
    import numpy as np

    from attnviz.corpus.items import read_texts
    from attnviz.corpus.plan import encode_items, plan_text
    from attnviz.corpus.reduce import BatchReducer

    WORK.mkdir(parents=True, exist_ok=True)
    model, tok = cb.minilm(WORK, None)
    red = BatchReducer(str(model), "cpu", tok, 1, 5)
    red.prepare()
    ig = red.in_graph
    texts = read_texts(cb.corpus_file(WORK, items))
    specs = plan_text(texts, encode_items(red.model, texts), None, None, 32, equal_lengths=False)
    batches = []
    for spec in specs[::every]:
        feeds, lengths, special = red.feeds(spec)
        lengths = np.asarray(lengths, np.int64)
        ran = ig.run(feeds, lengths, special, False, ig.sess)
        batches.append((list(spec.items), spec.batch_id, lengths, special, feeds, ran))
    kept = {"groups": ig.groups, "outputs": ig.outputs, "fetch": ig.fetch, "k": red.k, "batches": batches}
    with open(out, "wb") as f:
        pickle.dump(kept, f)
    return out


def _null_session(batches: list, fetch: list[str]):
    """A real onnxruntime CPU session whose outputs (``fetch``: the statistics' sums and picks) are the last kept
    batch's, sliced to each batch's size, and whose inputs are every feed of a batch (any shape): onnxruntime's
    binding and output conversion of a statistics run, with next to no compute."""
    import numpy as np
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    outs = batches[-1][5][0]
    feeds = {**batches[-1][4], **batches[-1][5][1]}
    ins = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), [f"{k}_{i}" for i in range(v.ndim)])
        for k, v in feeds.items()
    ]
    first = next(iter(batches[-1][4]))  # (input_ids: [B, T])
    const = [numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (("zero", 0), ("one", 1))]
    nodes = [
        helper.make_node("Shape", [first], ["shape"]),
        helper.make_node("Slice", ["shape", "zero", "one"], ["b"]),
        *[
            # (RANKS is [heads · S, K + 1], not batch-first: the last batch's, whole)
            helper.make_node("Identity", [f"{n}_all"], [n])
            if n == "attnviz_stat_ranks"
            else helper.make_node("Slice", [f"{n}_all", "zero", "b", "zero"], [n])
            for n in fetch
        ],
    ]
    inits = const + [numpy_helper.from_array(np.ascontiguousarray(outs[n]), f"{n}_all") for n in fetch]
    out = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(outs[n].dtype), None) for n in fetch]
    m = helper.make_model(
        helper.make_graph(nodes, "null", ins, out, inits), opset_imports=[helper.make_opsetid("", 17)]
    )
    m.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


class _Pinner:
    active = True
    state = "yes"

    def pin(self, addr, size):
        return True

    def unpin(self, addr):
        pass


def child(capture_path: str, reps: int) -> None:
    """One round in this process (attnviz as PYTHONPATH / sys.path gives it): per part, µs a batch (best of reps)."""
    import numpy as np

    from attnviz.corpus.fold import fold_items
    from attnviz.corpus.graph_reduce import InGraphReducer
    from attnviz.corpus.reduce import combine
    from attnviz.runtime import statfeeds as sf
    from attnviz.runtime.extra_session import ExtraSession
    from attnviz.runtime.guard import GuardedSession, MemoryCheck
    from attnviz.runtime.pinned_outputs import Buffers, PinnedOutputs

    with open(capture_path, "rb") as f:
        kept = pickle.load(f)
    red = InGraphReducer.__new__(InGraphReducer)
    red.model, red.exposed, red.groups, red.outputs = None, None, kept["groups"], kept["outputs"]
    k, fetch, batches = kept["k"], kept["fetch"], kept["batches"]
    if not hasattr(sf, "RANKS"):  # a tree before session 25: its session has no ranks to hand out
        fetch = [n for n in fetch if n != "attnviz_stat_ranks"]

    class _Plan:  # the memory check as it is once a shape has passed (every batch but a shape's first)
        passed: dict = {}

        def estimate(self, shapes, fetch, within):
            from types import SimpleNamespace

            return SimpleNamespace(bytes=0)

        def outputs(self):
            return fetch

    import threading

    _Plan.lock = threading.Lock()
    check = MemoryCheck(b"", "bench")
    check._plan = _Plan()
    null = _null_session(batches, fetch)
    plain = ExtraSession(GuardedSession(null, check))
    pinned_guard = GuardedSession(null, check)
    pinned_guard.outputs = PinnedOutputs(Buffers(_Pinner()))
    pinned = ExtraSession(pinned_guard)

    own = {b[1]: sf.stat_feeds(b[2], b[3], b[5][3], False)[0] for b in batches}  # this tree's feeds (its REAL)
    tail = getattr(red, "partial", None)  # the new code's finish and fold in one (the old: finish, then fold)

    def step(part: str, b) -> None:
        items, batch_id, lengths, special, feeds, ran = b
        if part in ("stat_feeds", "stat_feeds again"):
            sf.stat_feeds(lengths, special, ran[3], False)
        elif part == "wrapper":
            getattr(plain, "run_small", plain.run)(fetch, {**feeds, **own[batch_id]})
        elif part == "wrapper pinned":
            pinned.run(fetch, {**feeds, **own[batch_id]})
        elif part == "finish":
            step.parts = red.finish(ran, lengths, special, False)
        elif part == "fold":
            fold_items(step.parts, items, k, batch_id, int(lengths.sum()))
        elif tail is not None:
            step.out.append(tail(ran, lengths, special, False, items, k, batch_id))
        else:
            step.out.append(
                fold_items(red.finish(ran, lengths, special, False), items, k, batch_id, int(lengths.sum()))
            )

    # each batch's parts one after another, as a worker's loop does them (what each frees and allocates shapes
    # the next one's cost: allocator state), the batches in order; the best of ``reps`` passes per part
    wall = {p: [] for p in (*PARTS, "combine")}
    cpu = {p: [] for p in (*PARTS, "combine")}
    for _ in range(reps):
        tw = dict.fromkeys(PARTS, 0.0)
        tc = dict.fromkeys(PARTS, 0.0)
        step.out = []
        for b in batches:
            for part in PARTS:
                w0, c0 = time.perf_counter(), time.process_time()
                step(part, b)
                tw[part] += time.perf_counter() - w0
                tc[part] += time.process_time() - c0
        # the worker's task: its batches' partials as one (reduce.combine; batch ids made consecutive)
        parts = [dataclasses.replace(q, batch_id=i) for i, q in enumerate(step.out)]
        w0, c0 = time.perf_counter(), time.process_time()
        combine(parts, k)
        tw["combine"], tc["combine"] = time.perf_counter() - w0, time.process_time() - c0
        for part in (*PARTS, "combine"):
            wall[part].append(tw[part])
            cpu[part].append(tc[part])
    res = {p: (1e6 * min(wall[p]) / len(batches), 1e6 * min(cpu[p]) / len(batches)) for p in wall}
    res["_check"] = float(
        np.sum([fold_items(red.finish(b[5], b[2], b[3], False), b[0], k, b[1], 1).sums for b in batches])
    )
    print(json.dumps(res))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True, help="a folder holding the old attnviz package (git archive ... attnviz)")
    ap.add_argument("--items", type=int, default=2000)
    ap.add_argument("--every", type=int, default=3, help="capture every N-th batch")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.reps)
        return
    cap = capture(a.items, a.every)
    with open(cap, "rb") as f:
        nb = len(pickle.load(f)["batches"])
    codes = {"old": str(Path(a.old).resolve()), "new": str(ROOT)}
    rows: dict[str, list[dict]] = {"old": [], "new": []}
    loads = [os.getloadavg()[0]]
    for r in range(a.rounds):
        for name in ("old", "new") if r % 2 == 0 else ("new", "old"):
            env = {**os.environ, "PYTHONPATH": codes[name], "OMP_NUM_THREADS": "1"}
            out = subprocess.run(
                [sys.executable, __file__, "--old", a.old, "--child", str(cap), "--reps", str(a.reps)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
                cwd=codes[name],
            )
            rows[name].append(json.loads(out.stdout))
        loads.append(os.getloadavg()[0])
    checks = {n: {r["_check"] for r in rows[n]} for n in rows}
    print(f"{nb} batches of 32 (MiniLM, 12 heads x 6 layers), {a.rounds} rounds interleaved, best of {a.reps} a round")
    print(f"sum of every partial's sums: old {checks['old']} new {checks['new']}")
    print(f"{'part':<16}{'old µs':>9}{'new µs':>9}{'old/new':>9}{'old cpu':>9}{'new cpu':>9}{'cpu o/n':>9}")
    tot = {n: [0.0, 0.0] for n in rows}
    for part in PARTS:
        med = {n: [statistics.median(r[part][i] for r in rows[n]) for i in (0, 1)] for n in rows}
        if part in HOST:
            for n in rows:
                tot[n][0] += med[n][0]
                tot[n][1] += med[n][1]
        o, w = med["old"], med["new"]
        print(f"{part:<16}{o[0]:9.1f}{w[0]:9.1f}{o[0] / w[0]:9.2f}{o[1]:9.1f}{w[1]:9.1f}{o[1] / w[1]:9.2f}")
    o, w = tot["old"], tot["new"]
    print(f"{'host (sum)':<16}{o[0]:9.1f}{w[0]:9.1f}{o[0] / w[0]:9.2f}{o[1]:9.1f}{w[1]:9.1f}{o[1] / w[1]:9.2f}")
    med = {n: [statistics.median(r["combine"][i] for r in rows[n]) for i in (0, 1)] for n in rows}
    o, w = med["old"], med["new"]
    print(f"{'combine':<16}{o[0]:9.1f}{w[0]:9.1f}{o[0] / w[0]:9.2f}{o[1]:9.1f}{w[1]:9.1f}{o[1] / w[1]:9.2f}")
    o, w = [a + b for a, b in zip(tot["old"], med["old"])], [a + b for a, b in zip(tot["new"], med["new"])]
    print(f"{'host + combine':<16}{o[0]:9.1f}{w[0]:9.1f}{o[0] / w[0]:9.2f}{o[1]:9.1f}{w[1]:9.1f}{o[1] / w[1]:9.2f}")
    print("load average (1 min) before and after each round:", " ".join(f"{x:.2f}" for x in loads))


if __name__ == "__main__":
    main()
