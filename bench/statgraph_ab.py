"""Two versions of runtime/statgraph.py against each other and the plain model, interleaved batch by batch.

    OMP_NUM_THREADS=1 python bench/statgraph_ab.py --old OLD_statgraph.py [--items 2000] [--batch 32] [--rounds 5]
                                                   [--threads 1] [--join auto|yes|no] [--provider cpu|cuda]
                                                   [--cpu] [--min-t T]

``--old``: another statgraph.py (e.g. ``git show main:attnviz/runtime/statgraph.py > /tmp/old.py``); "new" is this
checkout's.  Per batch of MiniLM (as bench/statgraph_bench.py plans them), in one process and in turn: the plain
model (model outputs only), then each version's statistics path: ``stat_feeds`` + the session's run +
``item_stats`` + ``reduce.fold_items`` (what ``InGraphReducer.__call__`` does), the order of the two versions
alternating per batch.  Best later round per path, and (less load-bound on a shared machine) the median over
batches of each batch's least time's ratio; the sessions are also timed alone.  ``--min-t``: only the batches of
at least T tokens (the memory-bound long items).  Both versions' partials must agree (per-head sums within 1e-6,
the tests' tolerance; counts equal).

Also printed per version and layout: the appended nodes (constants not counted; a Cast to the type the tensor has
already is counted apart: onnxruntime drops it) and the nodes that read a whole ``[B, H, T, T]`` tensor (views,
shapes and strided or gathered reads of O(T) elements a row not counted): on a GPU each node is a launch and each
such read a pass over the maps in memory.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
os.environ["ATTNVIZ_INPROCESS"] = "1"

VIEWS = ("Reshape", "Shape", "Size", "Squeeze", "Unsqueeze", "Identity", "Flatten")


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def count(sg, model, groups, join: bool, b: int = 3, t: int = 13) -> tuple[int, int, Counter]:
    """(appended nodes, of them Casts onnxruntime drops, ops reading a whole [B, H, T, T] tensor by type), measured by
    running the statistics model on a padded batch with every appended node's output fetched."""
    import onnx
    import onnxruntime as ort

    from attnviz.runtime.model import _serialize

    m, exposed, _ = sg.stats_model(model.graph, model._sites, {g.site for g in groups}, join=join)
    nodes = [n for n in m.graph.node if n.name.startswith("attnviz_stat") and n.op_type != "Constant"]
    have = {o.name for o in m.graph.output}
    made = {o for n in m.graph.node for o in n.output if o}
    read = [i for n in nodes for i in n.input if i in made]  # model tensors they read besides the maps, if any
    for name in [o for n in nodes for o in n.output if o] + list(exposed.outputs) + read:
        if name not in have:
            m.graph.output.append(onnx.ValueInfoProto(name=name))
            have.add(name)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.add_session_config_entry("session.model_external_initializers_file_folder_path", model.external_dir or "")
    sess = ort.InferenceSession(_serialize(m), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    lengths = np.array([t, 7, 4][:b])
    feeds = {
        "input_ids": rng.integers(1000, 9000, (b, t)),
        "attention_mask": (np.arange(t)[None] < lengths[:, None]).astype(np.int64),
    }
    special = np.zeros((b, t), bool)
    special[:, 0] = True
    special[np.arange(b), lengths - 1] = True
    extra, _ = sg.stat_feeds(lengths, special, t)
    names = {i.name for i in m.graph.input}
    feeds = {k: v for k, v in {**feeds, **extra}.items() if k in names}
    fetch = [o.name for o in m.graph.output]
    got = dict(zip(fetch, sess.run(fetch, feeds)))
    full = {b * t * t * g.heads for g in groups} | {b * t * t * sum(g.heads for g in groups)}
    dropped, passes = 0, Counter()
    for n in nodes:
        if n.op_type == "Cast" and got[n.input[0]].dtype == got[n.output[0]].dtype:
            dropped += 1
            continue
        if not any(i in got and np.size(got[i]) in full for i in n.input) or n.op_type in VIEWS:
            continue
        if n.op_type in ("Slice", "Gather") and 4 * np.size(got[n.output[0]]) < max(
            np.size(got[i]) for i in n.input if i in got
        ):
            continue  # reads O(T) elements a row
        passes[n.op_type] += 1
    return len(nodes), dropped, passes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", required=True, help="the other statgraph.py")
    ap.add_argument("--items", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--provider", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--join", choices=("auto", "yes", "no"), default="auto", help="auto: joined on CUDA")
    ap.add_argument("--work", default="/tmp/attnviz_corpus_bench")
    ap.add_argument("--min-t", type=int, default=0, help="only the batches of at least this many tokens (long items)")
    ap.add_argument(
        "--cpu", action="store_true", help="time CPU seconds of this process (process_time), not wall: less load-bound"
    )
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    from corpus_bench import corpus_file, minilm

    from attnviz.core.row_sums import ItemStats
    from attnviz.corpus.items import read_texts
    from attnviz.corpus.plan import encode_items, plan_text
    from attnviz.corpus.reduce import BatchReducer, fold_items
    from attnviz.runtime import statgraph as new
    from attnviz.runtime.host import make_session
    from attnviz.runtime.model import _run_bound, _serialize

    old = load(a.old, "statgraph_old")
    clock = time.process_time if a.cpu else time.perf_counter
    model_path, tok = minilm(work)
    items = read_texts(corpus_file(work, a.items))
    br = BatchReducer(str(model_path), a.provider, tok, a.threads, in_graph=False)
    specs = plan_text(items, encode_items(br.model, items), None, None, a.batch, equal_lengths=False)
    model, groups = br.model, br.groups
    model.probe()
    join = a.provider == "cuda" if a.join == "auto" else a.join == "yes"
    for label, sg in (("old", old), ("new", new)):
        for j in (False, True):
            n, dropped, passes = count(sg, model, groups, j)
            print(
                f"{label} {'joined' if j else 'per site'}: {n} appended nodes ({dropped} Casts onnxruntime drops), "
                f"{sum(passes.values())} read a whole [B, H, T, T] tensor: {dict(passes)}"
            )
    sessions = {}
    for label, sg in (("old", old), ("new", new)):
        m, _, on = sg.stats_model(model.graph, model._sites, {g.site for g in groups}, join=join)
        assert on == [g.site for g in groups], "every site in the graph (MiniLM)"
        sess, _ = make_session(_serialize(m), a.provider, a.threads, external_dir=model.external_dir)
        sessions[label] = sg, sess
    plain, _ = make_session(str(model_path), a.provider, a.threads)
    heads = np.cumsum([0] + [g.heads for g in groups])
    fetch = [new.SUMS, new.PICKS]
    assert fetch == [old.SUMS, old.PICKS]

    def path(sg, sess, s, feeds, lengths, special):
        t0 = clock()
        extra, positions = sg.stat_feeds(lengths, special, special.shape[1], False)
        t1 = clock()
        got = _run_bound(sess, fetch, {**feeds, **extra})
        t2 = clock()
        st = sg.item_stats(got[0], got[1], extra, positions)
        parts = [
            (g, ItemStats(st.sums[:, h], st.counts, st.rows[:, h], st.keys[:, h]))
            for g, h in zip(groups, (slice(x, y) for x, y in zip(heads, heads[1:])))
        ]
        part = fold_items(parts, s.items, br.k, s.batch_id, int(lengths.sum()))
        return clock() - t0, t2 - t1, part

    batches = []
    for s in specs:
        feeds, lengths, special = br.feeds(s)
        if special.shape[1] >= a.min_t:
            batches.append((s, feeds, np.asarray(lengths, np.int64), special))
    keys = ("plain", "old", "new", "old session", "new session")
    best = dict.fromkeys(keys, np.inf)
    each = {k: np.full((a.rounds, len(batches)), np.inf) for k in keys}  # every batch's time in every round
    for rnd in range(a.rounds):
        took = dict.fromkeys(keys, 0.0)
        for k, (s, feeds, lengths, special) in enumerate(batches):
            t0 = clock()
            plain.run(None, feeds)
            each["plain"][rnd, k] = clock() - t0
            took["plain"] += each["plain"][rnd, k]
            parts = {}
            for label in ("old", "new") if k % 2 else ("new", "old"):
                sg, sess = sessions[label]
                whole, run, parts[label] = path(sg, sess, s, feeds, lengths, special)
                took[label] += whole
                took[f"{label} session"] += run
                each[label][rnd, k], each[f"{label} session"][rnd, k] = whole, run
            po, pn = parts["old"], parts["new"]
            assert np.array_equal(po.counts, pn.counts)
            np.testing.assert_allclose(pn.sums, po.sums, rtol=1e-6, atol=1e-6)  # the tests' tolerance
        if rnd or a.rounds == 1:
            best = {k: min(best[k], took[k]) for k in keys}
    n = len(batches)
    lengths = [b[3].shape[1] for b in batches]
    print(
        f"\n{model_path.name}, {len(items)} items in {n} batches of {a.batch} (T {min(lengths)}-{max(lengths)}), "
        f"{a.provider}, {a.threads} threads, statistics nodes {'joined' if join else 'per site'}, "
        f"{'CPU' if a.cpu else 'wall'} time, best of rounds "
        f"2..{a.rounds}, interleaved per batch; load average {os.getloadavg()[0]:.2f} at the end\n"
    )
    # less load-bound than the sums: each batch's least time over the later rounds, then the median of the
    # batches' ratios (a batch another job slowed in every round moves the median little)
    least = {k: v[1:].min(0) if a.rounds > 1 else v[0] for k, v in each.items()}
    print("| path | ms / batch | vs plain | new / old | median batch: vs plain | median batch: new / old |")
    print("|---|---:|---:|---:|---:|---:|")
    for k in keys:
        other = {"new": "old", "new session": "old session"}.get(k)
        ratio = f"{best[k] / best[other]:.3f}x" if other else ""
        med = f"{np.median(least[k] / least[other]):.3f}x" if other else ""
        print(
            f"| {k} | {1000 * best[k] / n:.2f} | {best[k] / best['plain']:.3f}x | {ratio} "
            f"| {np.median(least[k] / least['plain']):.3f}x | {med} |"
        )


if __name__ == "__main__":
    main()
