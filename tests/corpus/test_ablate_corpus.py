"""attnviz ablate --texts: head ablation over a corpus through the corpus engine.

References: each item run alone (no padding) through the model with one head's probabilities multiplied by 0 by
a graph edit written by hand (``test_ablate._hand_ablated``), the measures computed here in numpy and averaged over
the items; the planted copy task (``test_ablate.copy_task_model``), whose one copying head must rank first; the
local engine's numbers for Ray and for a resumed run.  The model file and the corpus are byte-identical after
every run.
"""

import hashlib
import json

import numpy as np
import onnx
import onnxruntime as ort
import pyarrow.parquet as pq
import pytest
from onnx_builders import tiny_text_model
from test_ablate import _hand_ablated, copy_task_model

from attnviz.cli import main
from attnviz.corpus.ablate_corpus import CHECKPOINT, AblateCorpusConfig, run_ablation
from attnviz.corpus.ablate_work import AblateSetup, HeadAblator, LabelledSpec

WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "home"]
VOCAB = ["[PAD]", "[CLS]", "[SEP]", *WORDS]  # onnx_builders.VOCAB: a word's id is its index here


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _corpus(path, n=10, seed=0, labels=None, lengths=(2, 7)):
    rng = np.random.default_rng(seed)
    lines = []
    for k in range(n):
        rec = {"text": " ".join(rng.choice(WORDS, int(rng.integers(*lengths))))}
        if labels is not None:
            rec["y"] = labels[k % len(labels)]
        lines.append(json.dumps(rec))
    path.write_text("\n".join(lines) + "\n")
    return path


def _texts(path):
    return [json.loads(line)["text"] for line in path.read_text().splitlines()]


def _table(folder):
    return pq.read_table(folder / "heads.parquet").to_pylist()


def _logits(model: onnx.ModelProto, ids: list[int]) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(["logits"], {"input_ids": np.array([ids], np.int64)})[0][0].astype(np.float64)


def _log_softmax(a):
    a = a - a.max(-1, keepdims=True)
    return a - np.log(np.exp(a).sum(-1, keepdims=True))


def _cfg(model, texts, out, **kw):
    kw.setdefault("workers", 2)
    kw.setdefault("batch_size", 3)
    return AblateCorpusConfig(model=str(model), out=str(out), texts=str(texts), progress=False, **kw)


def test_one_head_over_a_corpus_equals_the_graph_edited_by_hand_item_by_item(tmp_path):
    """A causal LM padded on the right in batches of mixed lengths: each head's mean KL and Δ next-token loss /
    accuracy equal those of the hand-edited graph run on each item alone, averaged over the items by numpy."""
    path = tiny_text_model(tmp_path / "lm.onnx", layers=2, heads=2, d=8, classifier=False, causal=True, seed=2)
    texts = _corpus(tmp_path / "c.jsonl", n=9)
    before = (_sha(path), _sha(texts))
    r = run_ablation(_cfg(path, texts, tmp_path / "out", all_heads=True))
    got = {(row["layer"], row["head"]): row for row in _table(tmp_path / "out")}
    items = [[VOCAB.index(w) for w in t.split()] for t in _texts(texts)]
    assert len({len(i) for i in items}) > 2 and r.run["batches"] > 1  # padding happened
    plain = onnx.load(path)
    base = [_log_softmax(_logits(plain, ids)) for ids in items]

    def loss_acc(log, ids):
        t = np.array(ids[1:])
        return -log[np.arange(len(t)), t].mean(), (log[:-1].argmax(-1) == t).mean()

    base_la = np.array([loss_acc(lp, ids) for lp, ids in zip(base, items)])
    for layer in (0, 1):
        for head in (0, 1):
            hand = _hand_ablated(path, layer, head, 2, "zero")
            kls, las = [], []
            for ids, lp in zip(items, base):
                lq = _log_softmax(_logits(hand, ids))
                kls.append(((np.exp(lp) * (lp - lq)).sum(-1) / np.log(2)).mean())
                las.append(loss_acc(lq, ids))
            row = got[(layer, head)]
            assert row["ablation_kl"] == pytest.approx(np.mean(kls), abs=1e-5)
            assert np.mean(kls) > 1e-3  # the head did something: a real change was compared
            dl, da = (np.array(las) - base_la).mean(0)
            assert row["ablation_delta_loss"] == pytest.approx(dl, abs=1e-5)
            assert row["ablation_delta_acc"] == pytest.approx(da, abs=1e-9)
            assert row["items"] == 9 and row["ablated_together"] == 1
    assert r.run["base_loss"] == pytest.approx(base_la[:, 0].mean(), abs=1e-5)
    assert r.run["labels"] == "next-token" and r.run["model"]["sha256"] == before[0]
    assert not (tmp_path / "out" / CHECKPOINT).exists()
    assert (_sha(path), _sha(texts)) == before


def test_a_labelled_classifier_gives_the_hand_computed_delta_loss(tmp_path, capsys):
    path = tiny_text_model(tmp_path / "cls.onnx", layers=2, heads=2, d=8, seed=1)
    labels = ["A", 1, "B", 0, 0]  # names from the model's attnviz.labels, or class indices
    texts = _corpus(tmp_path / "c.jsonl", n=10, seed=3, labels=labels)
    before = (_sha(path), _sha(texts))
    out = tmp_path / "out"
    rc = main(["ablate", str(path), "--all-heads", "--texts", str(texts), "--label-column", "y", "--out", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    y = np.array([{"A": 0, "B": 1}.get(v, v) for v in (labels * 2)[:10]])
    items = [[VOCAB.index(w) for w in ["[CLS]", *t.split(), "[SEP]"]] for t in _texts(texts)]
    base = np.array([_log_softmax(_logits(onnx.load(path), ids)) for ids in items])
    base_loss = -base[np.arange(10), y]
    rows = {(r["layer"], r["head"]): r for r in _table(out)}
    for (layer, head), row in rows.items():
        hand = _hand_ablated(path, layer, head, 2, "zero")
        lq = np.array([_log_softmax(_logits(hand, ids)) for ids in items])
        assert row["ablation_delta_loss"] == pytest.approx(np.mean(-lq[np.arange(10), y] - base_loss), abs=1e-5)
        want_acc = np.mean(lq.argmax(-1) == y) - np.mean(base.argmax(-1) == y)
        assert row["ablation_delta_acc"] == pytest.approx(want_acc, abs=1e-9)
        assert row["prediction_changed"] == pytest.approx(np.mean(lq.argmax(-1) != base.argmax(-1)), abs=1e-9)
        assert row["ablation_kl"] == pytest.approx(np.mean((np.exp(base) * (base - lq)).sum(-1)) / np.log(2), abs=1e-5)
    top = max(rows.values(), key=lambda r: r["ablation_kl"])
    assert printed.splitlines()[2].strip().startswith(f"encoder self {top['layer']}:{top['head']}")
    # the header says which way Δ runs, and the printed number is that: ablated minus base (by hand above)
    header = printed.splitlines()[1]
    assert "Δloss = ablated − base, nats" in header and "Δacc = ablated − base accuracy" in header
    hand = _hand_ablated(path, top["layer"], top["head"], 2, "zero")
    lq = np.array([_log_softmax(_logits(hand, ids)) for ids in items])
    assert f"Δloss {np.mean(-lq[np.arange(10), y] - base_loss):+.4g}  " in printed.splitlines()[2]
    run = json.loads((out / "run.json").read_text())
    assert run["base_loss"] == pytest.approx(base_loss.mean(), abs=1e-5) and run["label_column"] == "y"
    assert run["data"]["sha256"] and run["versions"]["onnxruntime"] == ort.__version__
    assert (_sha(path), _sha(texts)) == before


def _copy_model_with_words(path):
    """The planted copy task of test_ablate, with a batch axis and its vocabulary in metadata (a tokenizer)."""
    copy_task_model(path)
    m = onnx.load(path)
    for v in (*m.graph.input, *m.graph.output):
        v.type.tensor_type.shape.dim[0].dim_param = "batch"
    m.metadata_props.add(key="attnviz.vocab", value=json.dumps(["a", "b", "c", "d", "e", "f"]))
    onnx.save(m, path)
    return path


def test_the_copy_task_needs_one_head_and_the_corpus_ranks_it_first(tmp_path, capsys):
    path = _copy_model_with_words(tmp_path / "copy.onnx")
    rng = np.random.default_rng(5)
    texts = tmp_path / "c.txt"
    texts.write_text("".join(" ".join(rng.choice(list("abcdef"), 6)) + "\n" for _ in range(8)))
    before = (_sha(path), _sha(texts))
    out = tmp_path / "out"
    rc = main(["ablate", str(path), "--all-heads", "--texts", str(texts), "--out", str(out), "--workers", "1"])
    assert rc == 0
    io = capsys.readouterr()
    printed = io.out
    assert "ablate: 100%" in io.err and "corpus:" not in io.err  # its progress bar says which command it is
    rows = sorted(_table(out), key=lambda r: -r["ablation_kl"])
    assert [r["head"] for r in rows] == [1, 0]
    assert rows[0]["ablation_kl"] > 1.0 and rows[0]["prediction_changed"] == 1.0
    assert rows[1]["ablation_kl"] == 0.0 and rows[1]["ablation_max_dlogit"] == 0.0
    assert printed.splitlines()[2].strip().startswith("encoder self 0:1")
    assert (_sha(path), _sha(texts)) == before


def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path):
    path = tiny_text_model(tmp_path / "lm.onnx", layers=2, heads=2, d=8, classifier=False, causal=True, seed=2)
    texts = _corpus(tmp_path / "c.jsonl", n=12, seed=4)
    whole = run_ablation(_cfg(path, texts, tmp_path / "whole", all_heads=True, mode="mean"))

    def stop(done):
        if done >= 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_ablation(_cfg(path, texts, tmp_path / "cut", all_heads=True, mode="mean"), on_batch=stop)
    assert (tmp_path / "cut" / CHECKPOINT).exists() and not (tmp_path / "cut" / "heads.parquet").exists()
    resumed = run_ablation(_cfg(path, texts, tmp_path / "cut", all_heads=True, mode="mean", workers=1))
    assert resumed.run["resumed_from_items"] >= 3
    assert _table(tmp_path / "cut") == _table(tmp_path / "whole")
    assert whole.run["batches"] == resumed.run["batches"] and not (tmp_path / "cut" / CHECKPOINT).exists()
    other = run_ablation(_cfg(path, texts, tmp_path / "zero", all_heads=True))  # mode mean is not mode zero
    assert _table(tmp_path / "zero") != _table(tmp_path / "whole")
    assert other.run["mode"] == "zero"


def test_one_session_serves_every_head_and_batch(tmp_path, monkeypatch):
    import attnviz.runtime.model as model_module

    path = tiny_text_model(tmp_path / "lm.onnx", layers=2, heads=2, d=8, classifier=False, causal=True, seed=2)
    offs = tuple(((i, (h,)),) for i in (0, 1) for h in (0, 1))
    setup = AblateSetup(str(path), "cpu", None, 1, 0, (), 1, sites=(0, 1), offs=offs, labels="next-token")
    made = []
    real = model_module.make_session
    monkeypatch.setattr(model_module, "make_session", lambda *a, **k: made.append(1) or real(*a, **k))
    worker = HeadAblator(setup)
    opened = len(made)
    ids = np.array([[3, 4, 5, 6], [7, 8, 0, 0]], np.int32)
    spec = LabelledSpec(0, [0, 1], np.array([4, 2]), ids, np.zeros_like(ids, np.int8), np.zeros_like(ids, bool))
    parts = worker.many([spec, LabelledSpec(1, [0, 1], spec.lengths, ids, spec.type_ids, spec.special)])
    assert len(made) == opened  # 2 batches × (1 base + 4 heads) forwards, no session opened for them
    assert parts[0].kl.shape == (4,) and np.array_equal(parts[0].kl, parts[1].kl) and parts[0].kl.min() > 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--all-heads", "--label-column", "y"], "a decoder's labels are its next tokens"),
        (["--all-heads", "--text", "the cat"], "--text: for one input"),
        (["--heads", "decoder self 0:7"], "has 2 heads"),
        (["--all-heads", "--mode", "mean", "--engine", "nope"], "invalid choice"),
    ],
)
def test_bad_corpus_requests_are_one_line(tmp_path, capsys, argv, message):
    path = tiny_text_model(tmp_path / "lm.onnx", layers=2, heads=2, d=8, classifier=False, causal=True, seed=2)
    texts = _corpus(tmp_path / "c.jsonl", n=3)
    try:
        rc = main(["ablate", str(path), "--texts", str(texts), "--out", str(tmp_path / "o"), *argv])
    except SystemExit as e:  # argparse's own refusal
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_a_bad_label_is_one_line_naming_the_item(tmp_path, capsys):
    path = tiny_text_model(tmp_path / "cls.onnx", layers=1, heads=2, d=8)
    texts = _corpus(tmp_path / "c.jsonl", n=4, labels=[0, 1, "C", 1])
    rc = main(
        ["ablate", str(path), "--all-heads", "--texts", str(texts), "--label-column", "y", "--out", str(tmp_path / "o")]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "item 2 has label 'C'" in err and "A, B" in err
    argv = [
        "ablate",
        str(path),
        "--all-heads",
        "--texts",
        str(texts),
        "--label-column",
        "z",
        "--out",
        str(tmp_path / "o"),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "item 0 has no 'z' value" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_mean_mode_on_a_fused_op_is_refused_in_one_line(tmp_path):
    from test_ablate import fused_model

    from attnviz.runtime import open_model
    from attnviz.runtime.graph.ablate import GateRefused, gate_heads

    path, _, _ = fused_model(tmp_path / "mha.onnx", "ms")
    model = open_model(path, provider="cpu")
    model.probe()
    with pytest.raises(GateRefused, match="internal to the fused op; use --mode zero"):
        gate_heads(model.graph, model.graph_sites, [0], "fed")
    edited, gates = gate_heads(model.graph, model.graph_sites, [0], "zero")
    assert gates[0].fed is None and not [i for i in edited.graph.input if i.name.startswith("attnviz_head_mean")]


def _hand_fed(path, layer: int, head: int) -> onnx.ModelProto:
    """The model with layer ``layer``'s probabilities exposed as an output and head ``head``'s replaced by an
    input ``hand_F`` [1, 1, T, T]: p·mask + F·(1 − mask), written by hand."""
    from onnx import TensorProto, helper, numpy_helper

    m = onnx.load(path)
    mask = np.ones((1, 2, 1, 1), np.float32)
    mask[0, head] = 0.0
    m.graph.initializer.extend([numpy_helper.from_array(mask, "hm"), numpy_helper.from_array(1.0 - mask, "ho")])
    p = f"p{layer}"
    pv = next(n for n in m.graph.node if n.op_type == "MatMul" and n.input[0] == p)
    pv.input[0] = "hand_gated"
    at = list(m.graph.node).index(pv)
    extra = [
        helper.make_node("Mul", [p, "hm"], ["hand_kept"]),
        helper.make_node("Mul", ["hand_F", "ho"], ["hand_moved"]),
        helper.make_node("Add", ["hand_kept", "hand_moved"], ["hand_gated"]),
    ]
    for k, n in enumerate(extra):
        m.graph.node.insert(at + k, n)
    m.graph.input.append(helper.make_tensor_value_info("hand_F", TensorProto.FLOAT, [1, 1, "t", "t"]))
    m.graph.output.append(helper.make_tensor_value_info(p, TensorProto.FLOAT, None))
    return m


def test_mean_mode_feeds_the_corpus_mean_rows_computed_by_hand(tmp_path):
    """--mode mean: each real row q of the head becomes the mean of its rows q over the items that have one,
    restricted to the item's keys and renormalised — computed here from each item's own run (no padding)."""
    path = tiny_text_model(tmp_path / "lm.onnx", layers=2, heads=2, d=8, classifier=False, causal=True, seed=2)
    texts = _corpus(tmp_path / "c.jsonl", n=8, seed=6)
    before = (_sha(path), _sha(texts))
    run_ablation(_cfg(path, texts, tmp_path / "out", all_heads=True, mode="mean"))
    got = {(r["layer"], r["head"]): r for r in _table(tmp_path / "out")}
    items = [[VOCAB.index(w) for w in t.split()] for t in _texts(texts)]
    width = max(map(len, items))
    plain = onnx.load(path)
    base = [_log_softmax(_logits(plain, ids)) for ids in items]
    for layer in (0, 1):
        for head in (0, 1):
            m = _hand_fed(path, layer, head)
            sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])

            def run(ids, f):
                return sess.run(["logits", f"p{layer}"], {"input_ids": np.array([ids], np.int64), "hand_F": f})

            total, count = np.zeros((width, width)), np.zeros(width)
            for ids in items:  # p{layer} is read before the gate: the head's own rows, whatever F is
                n = len(ids)
                probs = run(ids, np.zeros((1, 1, n, n), np.float32))[1]
                assert probs.shape == (1, 2, n, n)
                total[:n, :n] += probs[0, head]
                count[:n] += 1
            mean = total / count[:, None]
            kls = []
            for ids, lp in zip(items, base):
                n = len(ids)
                f = mean[:n, :n] / mean[:n, :n].sum(-1, keepdims=True)
                assert np.allclose(np.triu(f, 1), 0)  # causal rows stay causal
                lq = _log_softmax(run(ids, f[None, None].astype(np.float32))[0][0].astype(np.float64))
                kls.append(((np.exp(lp) * (lp - lq)).sum(-1) / np.log(2)).mean())
            assert got[(layer, head)]["ablation_kl"] == pytest.approx(np.mean(kls), abs=1e-5)
            assert np.mean(kls) > 1e-4
    assert (_sha(path), _sha(texts)) == before


def test_ray_gives_the_local_engine_numbers(tmp_path, ray_local):
    path = tiny_text_model(tmp_path / "cls.onnx", layers=2, heads=2, d=8, seed=1)
    texts = _corpus(tmp_path / "c.jsonl", n=10, seed=3, labels=["A", "B", 1])
    before = (_sha(path), _sha(texts))
    run_ablation(_cfg(path, texts, tmp_path / "local", all_heads=True, label_column="y"))
    r = run_ablation(_cfg(path, texts, tmp_path / "ray", all_heads=True, label_column="y", engine="ray", threads=1))
    assert r.run["engine"] == "ray" and "ray" in r.run["versions"]
    assert _table(tmp_path / "ray") == _table(tmp_path / "local")  # the same sums in the same order: equal
    assert (_sha(path), _sha(texts)) == before


def test_a_padded_encoder_with_a_mask_matches_each_item_run_alone(tmp_path):
    """The demo classifier (attention_mask, mean pooling over real tokens) in padded batches of mixed lengths:
    each head's mean KL and Δloss equal those of the items run one at a time, unpadded, through the one-input
    ablation (itself checked against hand-edited graphs in test_ablate), measured here by numpy."""
    from pathlib import Path

    from attnviz.runtime import open_model
    from attnviz.runtime.ablation import Ablation
    from attnviz.runtime.request import AnalyzeRequest

    path = Path(__file__).parents[2] / "models" / "sequence-classification.onnx"
    rng = np.random.default_rng(2)
    seqs = [rng.integers(0, 10, int(rng.integers(3, 12))) for _ in range(10)]
    y = [int(2 * (s >= 5).sum() > len(s)) ^ 1 for s in seqs]  # the task's rule: A (0) when most digits are >= 5
    texts = tmp_path / "d.jsonl"
    texts.write_text("".join(json.dumps({"text": " ".join(map(str, s)), "y": v}) + "\n" for s, v in zip(seqs, y)))
    before = (_sha(path), _sha(texts))
    r = run_ablation(_cfg(path, texts, tmp_path / "out", all_heads=True, label_column="y", batch_size=4))
    assert r.run["batches"] == 3
    model = open_model(path, provider="cpu")
    runs = []
    for s in seqs:
        ids = (s + 1)[None].astype(np.int64)  # the demo's vocabulary: id = digit + 1
        req = AnalyzeRequest(feeds={"input_ids": ids, "attention_mask": np.ones_like(ids)})
        runs.append(Ablation(model, [0, 1], "zero", req))
    rows = _table(tmp_path / "out")
    assert max(x["ablation_kl"] for x in rows) > 1e-4  # some head matters: real changes were compared
    for row in rows:
        kls, dls = [], []
        for ab, label in zip(runs, y):
            lp = _log_softmax(ab.base[0].astype(np.float64))
            lq = _log_softmax(ab.run({row["layer"]: [row["head"]]})[0].astype(np.float64))
            kls.append((np.exp(lp) * (lp - lq)).sum() / np.log(2))
            dls.append(lp[label] - lq[label])
        # small numbers (the demo is sure of these items): relative agreement too, not only within 1e-5
        assert row["ablation_kl"] == pytest.approx(np.mean(kls), rel=1e-3, abs=1e-8)
        assert row["ablation_delta_loss"] == pytest.approx(np.mean(dls), rel=1e-3, abs=1e-8)
    assert r.run["base_accuracy"] == 1.0  # the demo solves its task: the labels are the ones it learnt
    assert (_sha(path), _sha(texts)) == before


def test_heads_named_together_are_one_joint_ablation(tmp_path):
    path = tiny_text_model(tmp_path / "lm.onnx", layers=2, heads=2, d=8, classifier=False, causal=True, seed=2)
    texts = _corpus(tmp_path / "c.jsonl", n=6)
    joint = run_ablation(_cfg(path, texts, tmp_path / "j", heads="decoder self 0:1,decoder self 1:0", batch_size=6))
    alone = run_ablation(_cfg(path, texts, tmp_path / "a", all_heads=True, batch_size=6))
    rows = _table(tmp_path / "j")
    assert [(r["layer"], r["head"], r["ablated_together"]) for r in rows] == [(0, 1, 2), (1, 0, 2)]
    assert rows[0]["ablation_kl"] == rows[1]["ablation_kl"] > 0  # one ablation, repeated on each named head's row
    singles = {(r["layer"], r["head"]): r["ablation_kl"] for r in _table(tmp_path / "a")}
    assert rows[0]["ablation_kl"] not in (singles[(0, 1)], singles[(1, 0)])
    assert joint.run["rows"].startswith("one per named head") and alone.run["rows"] == "one per head ablated alone"


def _features_model(path, seed):
    """The tiny causal LM with its output renamed last_hidden_state: no distribution, so no KL to rank by."""
    path = tiny_text_model(path, layers=2, heads=2, d=8, classifier=False, causal=True, seed=seed)
    m = onnx.load(path)
    old = m.graph.output[0].name
    for n in m.graph.node:
        n.output[:] = ["last_hidden_state" if t == old else t for t in n.output]
    m.graph.output[0].name = "last_hidden_state"
    onnx.save(m, path)
    return path


def _features(model: onnx.ModelProto, ids: list[int]) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(["last_hidden_state"], {"input_ids": np.array([ids], np.int64)})[0][0].astype(np.float64)


def test_an_output_without_logits_ranks_heads_by_the_mean_over_items(tmp_path, capsys):
    """cmp27: with no KL, heads were ranked by the corpus-wide largest |Δ|, which one outlier item decides.  Each
    head's mean over items of the item's largest |Δ| (each item run alone through the hand-edited graph, numpy)
    is `ablation_mean_max_dlogit`, the largest of them `ablation_max_dlogit`, and the printed table is in the
    order of the mean, its header saying so."""
    path = _features_model(tmp_path / "h.onnx", seed=2)
    texts = _corpus(tmp_path / "c.jsonl", n=9, seed=1)  # (a model and corpus where the two rankings differ)
    out = tmp_path / "out"
    argv = ["ablate", str(path), "--all-heads", "--texts", str(texts), "--out", str(out), "--batch-size", "3"]
    assert main([*argv, "--workers", "1"]) == 0
    printed = capsys.readouterr().out.splitlines()
    rows = {(r["layer"], r["head"]): r for r in _table(out)}
    items = [[VOCAB.index(w) for w in t.split()] for t in _texts(texts)]
    assert len({len(i) for i in items}) > 2  # padded batches of mixed lengths
    plain = onnx.load(path)
    base = [_features(plain, ids) for ids in items]
    by_hand = {}
    for layer in (0, 1):
        for head in (0, 1):
            hand = _hand_ablated(path, layer, head, 2, "zero")
            per_item = [float(np.abs(_features(hand, ids) - b).max()) for ids, b in zip(items, base)]
            by_hand[(layer, head)] = per_item
            row = rows[(layer, head)]
            assert row["ablation_kl"] is None
            assert row["ablation_mean_max_dlogit"] == pytest.approx(np.mean(per_item), rel=1e-4, abs=1e-6)
            assert row["ablation_max_dlogit"] == pytest.approx(max(per_item), rel=1e-4, abs=1e-6)
    header = next(line for line in printed if line.startswith("heads that matter most"))
    assert "mean over items of each item's max |Δlast_hidden_state|" in header
    listed = [line.split()[2] for line in printed if line.startswith("  decoder self ")]
    by_mean = sorted(by_hand, key=lambda k: -np.mean(by_hand[k]))
    assert listed == [f"{lay}:{h}" for lay, h in by_mean]
    by_max = sorted(by_hand, key=lambda k: -max(by_hand[k]))
    assert by_max[0] != by_mean[0]  # one item's outlier would have put another head first


def test_a_checkpoint_without_the_per_item_sums_is_one_line(tmp_path):
    """A checkpoint written before the per-item |Δ| sums were kept (its fingerprint the run's own) is named as an
    older attnviz's, to delete, not folded with a made-up zero sum."""
    from attnviz import AttnvizError
    from attnviz.corpus.ablate_corpus import Totals

    ckpt = tmp_path / CHECKPOINT
    t = Totals(3)
    t.save(ckpt, "fp")
    with np.load(ckpt) as z:
        old = {k: z[k] for k in z.files if k != "dsum"}
    np.savez(ckpt, **old)
    assert Totals.load(ckpt, "another", 3) is None  # another run's: as before
    with pytest.raises(AttnvizError, match="older attnviz .* delete it to start over"):
        Totals.load(ckpt, "fp", 3)
