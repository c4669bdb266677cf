"""attnviz ablate: heads switched off in an in-memory copy of the graph.

References: the same ONNX model with one head's probabilities multiplied by 0 (or replaced by their mean row) by a
graph edit written here with onnx.helper; a hand-built "copy the previous token" model whose one copying head is
the only head that matters; fused ops (ONNX ``Attention``, com.microsoft ``MultiHeadAttention``) against a numpy
computation of the attention with that head's output left out.  The user's file is byte-identical after every run.
"""

import hashlib
import json

import numpy as np
import onnx
import onnxruntime as ort
import pyarrow.parquet as pq
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import gqa_model, split_export, tiny_text_model

from attnviz.cli import main
from attnviz.runtime import open_model
from attnviz.runtime.ablation import Ablation
from attnviz.runtime.graph import ablate as ablate_graph
from attnviz.runtime.request import AnalyzeRequest

TEXT = "the cat sat on a mat"


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def _heads(folder):
    return pq.read_table(folder / "heads.parquet").to_pylist()


def _session(model: onnx.ModelProto):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _hand_ablated(path, layer: int, head: int, heads: int, mode: str) -> onnx.ModelProto:
    """tiny_text_model with layer ``layer``'s probabilities p{layer} gated by hand: the P·V MatMul reads
    p·mask (zero) or p·mask + mean_q(p)·(1 − mask) (mean) instead of p."""
    m = onnx.load(path)
    mask = np.ones((1, heads, 1, 1), np.float32)
    mask[0, head] = 0.0
    p = f"p{layer}"
    m.graph.initializer.extend(
        [numpy_helper.from_array(mask, "hand_mask"), numpy_helper.from_array(1.0 - mask, "hand_off")]
    )
    extra = [helper.make_node("Mul", [p, "hand_mask"], ["hand_kept"])]
    gated = "hand_kept"
    if mode == "mean":
        m.graph.initializer.append(numpy_helper.from_array(np.array([2], np.int64), "hand_axes"))
        extra += [
            helper.make_node("ReduceMean", [p, "hand_axes"], ["hand_mean"], keepdims=1),
            helper.make_node("Mul", ["hand_mean", "hand_off"], ["hand_moved"]),
            helper.make_node("Add", ["hand_kept", "hand_moved"], ["hand_gated"]),
        ]
        gated = "hand_gated"
    pv = next(n for n in m.graph.node if n.op_type == "MatMul" and n.input[0] == p)
    pv.input[0] = gated
    at = list(m.graph.node).index(pv)
    for k, n in enumerate(extra):
        m.graph.node.insert(at + k, n)
    onnx.checker.check_model(m)
    return m


@pytest.mark.parametrize("mode", ["zero", "mean"])
@pytest.mark.parametrize("rank", ["inferred", "unknown"])
def test_ablating_a_head_equals_a_graph_edited_by_hand(tmp_path, mode, rank, monkeypatch):
    if rank == "unknown":  # no rank known: the gate goes through its [-1, H, Q, K] view of the probabilities
        monkeypatch.setattr(ablate_graph.Ranks, "__call__", lambda self, name: None)
    path = tiny_text_model(tmp_path / "m.onnx", layers=2, heads=2, d=8, classifier=False, seed=4)
    before = _sha(path)
    model = open_model(path, provider="cpu")
    ids = np.array([[1, 3, 4, 5, 6, 8, 7, 2]], np.int64)
    plain = _session(onnx.load(path)).run(["logits"], {"input_ids": ids})[0]
    ab = Ablation(model, [0, 1], mode, AnalyzeRequest(feeds={"input_ids": ids}))
    np.testing.assert_array_equal(ab.base, plain)  # an all-ones gate is the model itself
    edited, _ = ablate_graph.gate_heads(model.graph, model.graph_sites, [0], mode)
    assert ("Slice" in {n.op_type for n in edited.graph.node}) == (rank == "unknown")  # the path this case tests
    for layer in (0, 1):
        for head in (0, 1):
            want = _session(_hand_ablated(path, layer, head, 2, mode)).run(["logits"], {"input_ids": ids})[0]
            got = ab.run({layer: [head]})
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
            assert np.abs(want - plain).max() > 1e-3  # the head did something: the check compared real changes
            c = ab.change({layer: [head]})
            assert c.max_dlogit == pytest.approx(float(np.abs(want - plain).max()), abs=1e-5)
            lp = plain[0] - np.log(np.exp(plain[0]).sum(-1, keepdims=True))
            lq = want[0] - np.log(np.exp(want[0]).sum(-1, keepdims=True))
            kl = float((np.exp(lp) * (lp - lq)).sum(-1).mean() / np.log(2))
            assert c.kl_bits == pytest.approx(kl, rel=1e-4, abs=1e-7)
            assert c.prediction_changed == bool((plain.argmax(-1) != want.argmax(-1)).any())
    assert _sha(path) == before


def copy_task_model(path, vocab: int = 6, seq: int = 6):
    """Two heads over one-hot [token ; position] embeddings.  Head 1 attends from position i to i − 1 (its query
    is position i shifted back, its key the position, a score of 20) and carries the token there; head 0 attends
    by random weights, but the output projection reads only head 1: logits[i] = 10 · onehot(token[i − 1])."""
    rng = np.random.default_rng(0)
    d = vocab + seq
    emb = np.zeros((vocab, d), np.float32)
    emb[:, :vocab] = np.eye(vocab)
    pos = np.zeros((seq, d), np.float32)
    pos[:, vocab:] = np.eye(seq)
    wq = np.zeros((d, 2 * d), np.float32)
    wk = np.zeros((d, 2 * d), np.float32)
    wv = np.zeros((d, 2 * d), np.float32)
    wq[:, :d], wk[:, :d], wv[:, :d] = (rng.standard_normal((3, d, d)) * 0.5).astype(np.float32)
    for i in range(1, seq):
        wq[vocab + i, d + vocab + i - 1] = 20.0  # head 1: position i asks for position i - 1
    for i in range(seq):
        wk[vocab + i, d + vocab + i] = 1.0
    wv[:vocab, d : d + vocab] = np.eye(vocab)  # head 1 carries the token
    wo = np.zeros((2 * d, vocab), np.float32)
    wo[d : d + vocab] = 10.0 * np.eye(vocab)  # only head 1 reaches the logits
    inits = [
        numpy_helper.from_array(a, n)
        for n, a in [
            ("emb", emb),
            ("pos", pos),
            ("Wq", wq),
            ("Wk", wk),
            ("Wv", wv),
            ("Wo", wo),
            ("split", np.array([0, 0, 2, d], np.int64)),
            ("merge", np.array([0, 0, 2 * d], np.int64)),
        ]
    ]
    nodes = [
        helper.make_node("Gather", ["emb", "input_ids"], ["tok"]),
        helper.make_node("Add", ["tok", "pos"], ["x"]),
    ]
    for w, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [
            helper.make_node("MatMul", ["x", f"W{w}"], [f"{w}_lin"]),
            helper.make_node("Reshape", [f"{w}_lin", "split"], [f"{w}_r"]),
            helper.make_node("Transpose", [f"{w}_r"], [f"{w}_t"], perm=perm),
        ]
    nodes += [
        helper.make_node("MatMul", ["q_t", "k_t"], ["scores"], name="/encoder/layers.0/attn/MatMul"),
        helper.make_node("Softmax", ["scores"], ["probs"], axis=-1, name="/encoder/layers.0/attn/Softmax"),
        helper.make_node("MatMul", ["probs", "v_t"], ["ctx"], name="/encoder/layers.0/attn/MatMul_1"),
        helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx_t", "merge"], ["ctx_r"]),
        helper.make_node("MatMul", ["ctx_r", "Wo"], ["logits"]),
    ]
    g = helper.make_graph(
        nodes,
        "copy",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, seq, vocab])],
        initializer=inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return path


def test_ablating_every_head_of_a_copy_task_finds_the_copying_head(tmp_path, capsys):
    path = copy_task_model(tmp_path / "copy.onnx")
    ids = np.array([[3, 1, 4, 5, 2, 5]], np.int64)
    logits = _session(onnx.load(path)).run(["logits"], {"input_ids": ids})[0]
    assert (logits[0, 1:].argmax(-1) == ids[0, :-1]).all()  # the model does copy the previous token
    np.savez(tmp_path / "feeds.npz", input_ids=ids)
    before = _sha(path)
    out = tmp_path / "ab"
    rc, printed, err = _run(
        ["ablate", str(path), "--inputs", str(tmp_path / "feeds.npz"), "--all-heads", "--out", str(out)], capsys
    )
    assert rc == 0, err
    rows = {r["head"]: r for r in _heads(out)}
    assert set(rows) == {0, 1} and all(r["ablated_together"] == 1 for r in rows.values())
    assert rows[1]["prediction_changed"] and rows[1]["ablation_kl"] > 1.0 and rows[1]["ablation_max_dlogit"] >= 9.0
    assert not rows[0]["prediction_changed"] and rows[0]["ablation_kl"] == 0.0 and rows[0]["ablation_max_dlogit"] == 0.0
    assert rows[1]["gate"] == "probabilities" and rows[1]["generation_changed"] is None
    # against the unablated run: onnxruntime on the graph with head 1's probabilities multiplied by 0 by hand
    want = _session(_copy_head_off(path, 1)).run(["logits"], {"input_ids": ids})[0]
    changed = int((logits[0].argmax(-1) != want[0].argmax(-1)).sum())
    before_last, after_last = int(logits[0, -1].argmax()), int(want[0, -1].argmax())
    assert changed >= 5 and before_last != after_last  # copying stopped: the check reads a real change
    assert rows[1]["changed_positions"] == changed and rows[0]["changed_positions"] == 0
    lines = printed.splitlines()
    assert lines[1] == f"base top-1 at the last position: {before_last}"  # the baseline, once
    assert lines[2].startswith("heads that matter most")
    assert lines[3].strip().startswith("encoder self 0:1")  # printed first: the head that matters
    assert lines[3].endswith(f"top-1 changed at {changed} of 6 positions (last: {before_last} → {after_last})")
    assert "changed" not in lines[4]  # head 0 changed nothing, and its line says nothing of a change
    run = json.loads((out / "run.json").read_text())
    assert run["model"]["sha256"] == before and run["sites"][0]["gate"] == "probabilities"
    assert run["base_prediction"] == str(before_last)
    assert _sha(path) == before
    # --heads: the joint line names the change against the base in words, positions counted
    rc, printed, err = _run(
        [
            "ablate",
            str(path),
            "--inputs",
            str(tmp_path / "feeds.npz"),
            "--heads",
            "encoder self 0:1",
            "--out",
            str(tmp_path / "joint"),
        ],
        capsys,
    )
    assert rc == 0, err
    assert printed.splitlines()[1].endswith(
        f", top-1 changed at {changed} of 6 positions, last position's top-1 changed: {before_last} → {after_last}"
    )
    joint = json.loads((tmp_path / "joint" / "run.json").read_text())["joint"]
    assert (joint["changed_positions"], joint["positions"], joint["prediction"]) == (changed, 6, str(after_last))
    # head 0 alone (the output projection never reads it): nothing moved, said as such
    argv = ["ablate", str(path), "--inputs", str(tmp_path / "feeds.npz"), "--heads", "encoder self 0:0"]
    rc, printed, err = _run([*argv, "--out", str(tmp_path / "none")], capsys)
    assert rc == 0, err
    assert printed.splitlines()[1].endswith(f", top-1 unchanged at all 6 positions (last: {before_last})")


def _copy_head_off(path, head: int) -> onnx.ModelProto:
    """copy_task_model with head ``head``'s probabilities multiplied by 0 before P·V, written here by hand."""
    m = onnx.load(path)
    mask = np.ones((1, 2, 1, 1), np.float32)
    mask[0, head] = 0.0
    m.graph.initializer.append(numpy_helper.from_array(mask, "hand_mask"))
    pv = next(n for n in m.graph.node if n.name == "/encoder/layers.0/attn/MatMul_1")
    pv.input[0] = "hand_probs"
    m.graph.node.insert(list(m.graph.node).index(pv), helper.make_node("Mul", ["probs", "hand_mask"], ["hand_probs"]))
    onnx.checker.check_model(m)
    return m


def fused_model(path, op: str, heads: int = 2, d: int = 8, seq: int = 5, classes: int = 3, seed: int = 0):
    """x [1, S, D] -> q, k, v projections -> one fused attention op -> output projection -> logits.  ``onnx4d``:
    the ONNX op on [B, H, S, dh] inputs (its output [B, H, S, dh]), the others on [B, S, D].  Returns (path, feeds, numpy reference f(head to leave out or None) -> logits)."""
    rng = np.random.default_rng(seed)
    w = {n: (rng.standard_normal((d, d)) * 0.6).astype(np.float32) for n in ("Wq", "Wk", "Wv")}
    w["Wo"] = rng.standard_normal((d, classes)).astype(np.float32)
    dh = d // heads
    four = op == "onnx4d"
    if op == "onnx":
        att = helper.make_node("Attention", ["q", "k", "v"], ["y"], q_num_heads=heads, kv_num_heads=heads, name="att")
        opsets = [helper.make_opsetid("", 23)]
    elif four:
        att = helper.make_node("Attention", ["q4", "k4", "v4"], ["y4"], name="att")
        opsets = [helper.make_opsetid("", 23)]
    else:
        att = helper.make_node(
            "MultiHeadAttention", ["q", "k", "v"], ["y"], domain="com.microsoft", num_heads=heads, name="att"
        )
        opsets = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    nodes = [helper.make_node("MatMul", ["x", f"W{n}"], [n]) for n in "qkv"]
    if four:  # [B, S, D] -> [B, H, S, dh] and back around the op
        w["split"] = np.array([0, 0, heads, dh], np.int64)
        w["merge"] = np.array([0, 0, d], np.int64)
        for n in "qkv":
            nodes += [
                helper.make_node("Reshape", [n, "split"], [f"{n}r"]),
                helper.make_node("Transpose", [f"{n}r"], [f"{n}4"], perm=[0, 2, 1, 3]),
            ]
        nodes += [
            att,
            helper.make_node("Transpose", ["y4"], ["yt"], perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", ["yt", "merge"], ["y"]),
        ]
    else:
        nodes.append(att)
    nodes.append(helper.make_node("MatMul", ["y", "Wo"], ["logits"]))
    g = helper.make_graph(
        nodes,
        "fused",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, d])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, seq, classes])],
        initializer=[numpy_helper.from_array(a, n) for n, a in w.items()],
    )
    m = helper.make_model(g, opset_imports=opsets)
    m.ir_version = 10
    onnx.save(m, path)
    x = rng.standard_normal((1, seq, d)).astype(np.float32)

    def reference(off, mode="zero"):
        q, k, v = (x[0] @ w[f"W{n}"] for n in "qkv")
        outs = []
        for h in range(heads):
            sl = slice(h * dh, (h + 1) * dh)
            s = q[:, sl] @ k[:, sl].T / np.sqrt(dh)
            p = np.exp(s - s.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            if h == off:  # head ``off``'s probabilities × 0, or each row replaced by the mean row
                p = np.zeros_like(p) if mode == "zero" else np.broadcast_to(p.mean(0), p.shape)
            outs.append(p @ v[:, sl])
        return (np.concatenate(outs, -1) @ w["Wo"])[None]

    return path, {"x": x}, reference


@pytest.mark.parametrize("op", ["onnx", "onnx4d", "ms"])
def test_a_fused_op_is_gated_on_its_output_per_head(tmp_path, op, capsys):
    path, feeds, reference = fused_model(tmp_path / f"{op}.onnx", op)
    model = open_model(path, provider="cpu")
    assert [s.method for s in model.sites] == ["mha-qk" if op == "ms" else "onnx-attention"]
    ab = Ablation(model, [0], "zero", AnalyzeRequest(feeds=feeds))
    assert ab.gates[0].method == "output"
    np.testing.assert_allclose(ab.base, reference(None), atol=1e-5)
    mean = Ablation(model, [0], "mean", AnalyzeRequest(feeds=feeds))
    for h in (0, 1):
        np.testing.assert_allclose(ab.run({0: [h]}), reference(h), atol=1e-5, rtol=0)
        np.testing.assert_allclose(mean.run({0: [h]}), reference(h, "mean"), atol=1e-5, rtol=0)
        assert np.abs(reference(h, "mean") - reference(h)).max() > 1e-3  # the two modes differ here
    np.savez(tmp_path / "feeds.npz", **feeds)
    before = _sha(path)
    rc, printed, err = _run(
        [
            "ablate",
            str(path),
            "--inputs",
            str(tmp_path / "feeds.npz"),
            "--heads",
            "encoder self 0:1",
            "--out",
            str(tmp_path / "o"),
        ],
        capsys,
    )
    assert rc == 0, err
    assert "gated on the fused op's output per head" in printed
    (row,) = _heads(tmp_path / "o")
    assert row["gate"] == "output" and row["head"] == 1
    assert row["ablation_max_dlogit"] == pytest.approx(float(np.abs(reference(1) - reference(None)).max()), abs=1e-5)
    assert _sha(path) == before


def test_joint_ablation_and_generation(tmp_path, capsys):
    path = tiny_text_model(tmp_path / "lm.onnx", layers=2, heads=2, d=8, classifier=False, causal=True, seed=2)
    before = _sha(path)
    out = tmp_path / "j"
    rc, printed, err = _run(
        [
            "ablate",
            str(path),
            "--text",
            "the cat",
            "--generate",
            "4",
            "--heads",
            "decoder self 0:0, decoder self 1:1",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert rc == 0, err
    rows = _heads(out)
    assert [(r["layer"], r["head"], r["ablated_together"]) for r in rows] == [(0, 0, 2), (1, 1, 2)]
    assert rows[0]["ablation_kl"] == rows[1]["ablation_kl"]  # one joint ablation, repeated per named head
    run = json.loads((out / "run.json").read_text())
    assert len(run["base_generated"]) >= 1 and run["joint"]["heads"] == ["decoder self 0:0", "decoder self 1:1"]
    assert run["input"] == {"text": "the cat", "generate": 4}  # the input flags given, and only they
    # the joint numbers against the gated session run by hand: the greedy tokens with both heads off
    model = open_model(path, provider="cpu")
    ab = Ablation(model, [0, 1], "zero", AnalyzeRequest(text="the cat", generate=4))
    gen = ab.generate({0: [0], 1: [1]})
    assert run["joint"]["generation_changed"] == (gen != ab.base_generated) == rows[0]["generation_changed"]
    assert "2 heads of 2 sites together" in printed and "output change:" in printed and _sha(path) == before


@pytest.mark.parametrize(
    "heads,message",
    [
        ("encoder self 0", "write each head as 'STACK KIND LAYER:HEAD'"),
        ("encoder self 7:0", "has no site encoder self L7; its sites: encoder self L0 (2 heads)"),
        ("encoder self 0:2", "encoder self L0 has 2 heads (0 to 1)"),
    ],
)
def test_bad_head_specs_are_one_line(tmp_path, capsys, heads, message):
    path = tiny_text_model(tmp_path / "m.onnx", layers=2, heads=2, d=8)
    rc, _, err = _run(["ablate", str(path), "--text", TEXT, "--heads", heads, "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "o").exists()


def test_missing_or_doubled_head_choice_and_bad_out_are_one_line(tmp_path, capsys):
    path = tiny_text_model(tmp_path / "m.onnx", layers=1, heads=2, d=8)
    rc, _, err = _run(["ablate", str(path), "--text", TEXT, "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and "--all-heads" in err and len(err.strip().splitlines()) == 1
    rc, _, err = _run(
        [
            "ablate",
            str(path),
            "--text",
            TEXT,
            "--heads",
            "encoder self 0:0",
            "--all-heads",
            "--out",
            str(tmp_path / "o"),
        ],
        capsys,
    )
    assert rc == 2 and "not both" in err
    (tmp_path / "file").write_text("x")
    rc, _, err = _run(["ablate", str(path), "--text", TEXT, "--all-heads", "--out", str(tmp_path / "file")], capsys)
    assert rc == 2 and "is a file" in err and (tmp_path / "file").read_text() == "x"
    before = _sha(path)
    rc, _, err = _run(["ablate", str(path), "--text", TEXT, "--all-heads", "--out", str(path)], capsys)
    assert rc == 2 and _sha(path) == before


def test_group_query_attention_is_gated_on_its_output(tmp_path):
    """com.microsoft GroupQueryAttention (4 query heads over 2 KV heads): its output ``y`` (not logits: no KL) with
    one query head's probabilities × 0, from the builder's own numpy probabilities."""
    path, feeds, probs = gqa_model(tmp_path / "gqa.onnx", heads=4, kv_heads=2, d=8)
    before = _sha(path)
    model = open_model(path, provider="cpu")
    ab = Ablation(model, [0], "zero", AnalyzeRequest(feeds=feeds))
    assert ab.gates[0].method == "output" and ab.output == "y"
    v = np.repeat(
        feeds["v"].reshape(1, 5, 2, 8).transpose(0, 2, 1, 3), 2, axis=1
    )  # [1, 4, S, d]: KV head per query head
    for h in range(4):
        p = probs.copy()
        p[:, h] = 0.0
        want = (p @ v).transpose(0, 2, 1, 3).reshape(1, 5, 32)  # the output projection is the identity
        np.testing.assert_allclose(ab.run({0: [h]}), want, atol=1e-5, rtol=0)
        c = ab.change({0: [h]})
        assert c.kl_bits is None and c.max_dlogit > 1e-3
    assert _sha(path) == before


def test_a_site_no_gate_fits_is_refused_in_one_line_naming_it(tmp_path, capsys):
    """Attention inside a Loop body (tests/runtime/test_subgraphs.py's model): one gate would act on every
    iteration at once, so the site is refused by name; --all-heads has nothing left to ablate."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "subgraphs", Path(__file__).parents[1] / "runtime" / "test_subgraphs.py"
    )
    sub = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sub)
    path, _ = sub.loop_model(tmp_path / "loop.onnx")
    np.savez(tmp_path / "feeds.npz", x=np.ones((1, 4, 8), np.float32))
    before = _sha(path)
    for choice in (["--heads", "encoder self 0:0"], ["--all-heads"]):
        rc, _, err = _run(
            ["ablate", str(path), "--inputs", str(tmp_path / "feeds.npz"), *choice, "--out", str(tmp_path / "o")],
            capsys,
        )
        assert rc == 2 and len(err.strip().splitlines()) == 1, err
        assert "cannot ablate encoder self L0 ('body/Softmax', softmax): it sits inside an If / Loop / Scan body" in err
    assert not (tmp_path / "o").exists() and _sha(path) == before


def test_a_forecaster_gets_the_largest_difference_alone(tmp_path, capsys):
    """A forecaster's output is values even when named logits (the demo's is): no KL, no argmax 'prediction'."""
    path = tiny_text_model(tmp_path / "f.onnx", layers=1, heads=2, d=8)
    m = onnx.load(path)
    next(p for p in m.metadata_props if p.key == "attnviz.task").value = "forecasting"
    onnx.save(m, path)
    rc, printed, err = _run(["ablate", str(path), "--text", TEXT, "--all-heads", "--out", str(tmp_path / "o")], capsys)
    assert rc == 0, err
    rows = _heads(tmp_path / "o")
    assert all(r["ablation_kl"] is None and r["prediction_changed"] is None for r in rows)
    assert max(r["ablation_max_dlogit"] for r in rows) > 1e-4 and "KL" not in printed.splitlines()[2]


def test_features_get_the_largest_difference_alone(tmp_path, capsys):
    """An encoder's features (last_hidden_state, a tower's image_features) are no distribution: no KL and no
    argmax "prediction changed" (argmax over hidden units means nothing), as the corpus ablation decides it."""
    path = tiny_text_model(tmp_path / "h.onnx", layers=1, heads=2, d=8)
    m = onnx.load(path)
    old = m.graph.output[0].name
    for n in m.graph.node:
        n.input[:] = ["last_hidden_state" if t == old else t for t in n.input]
        n.output[:] = ["last_hidden_state" if t == old else t for t in n.output]
    m.graph.output[0].name = "last_hidden_state"
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, path)
    rc, printed, err = _run(
        ["ablate", str(path), "--text", TEXT, "--heads", "encoder self 0:1", "--out", str(tmp_path / "o")], capsys
    )
    assert rc == 0, err
    rows = _heads(tmp_path / "o")
    assert rows and all(r["ablation_kl"] is None and r["prediction_changed"] is None for r in rows)
    said = next(line for line in printed.splitlines() if line.startswith("output change:"))
    assert "Δlast_hidden_state" in said and "prediction" not in said and "KL" not in said


def test_an_export_folder_is_refused_in_one_line(tmp_path, capsys):
    from pathlib import Path

    folder = split_export(Path(__file__).resolve().parents[2] / "models" / "translation.onnx", tmp_path / "export")
    rc, _, err = _run(["ablate", str(folder), "--text", "λόγος", "--all-heads", "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "ablate runs one ONNX file" in err, err


def test_one_input_generation_prints_both_generations(tmp_path, capsys):
    """`ablate --generate N --heads ...` prints the words before and after, as `extract` prints what it generated: it
    said "generation changed" alone, and the README's "Blessed are the poor , the Holy Spirit" becomes "... the poor
    will" was in run.json only (audit25).  The base line is `extract --generate 8`'s; the ablated one the gated
    session's greedy tokens, run by hand."""
    from pathlib import Path

    demo = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"
    if not demo.exists():
        pytest.skip("the translation demo is not in this checkout")
    src = "μακάριοι οἱ πτωχοὶ τῷ πνεύματι"
    assert main(["extract", str(demo), "--text", src, "--generate", "8", "--out", str(tmp_path / "m.npz")]) == 0
    said = capsys.readouterr().out.splitlines()
    base = next(line for line in said if line.startswith("generated: ")).removeprefix("generated: ")
    flags = ["--text", src, "--generate", "8", "--heads", "decoder cross 2:1", "--out", str(tmp_path / "a")]
    rc, printed, err = _run(["ablate", str(demo), *flags], capsys)
    assert rc == 0, err
    model = open_model(demo, provider="cpu")
    cross2 = next(i for i, s in enumerate(model.sites) if (s.stack, s.kind, s.layer) == ("decoder", "cross", 2))
    ab = Ablation(model, [cross2], "zero", AnalyzeRequest(text=src, generate=8))
    off = " ".join(ab.prep.tgt_tok.label(i) for i in ab.generate({cross2: [1]}))
    lines = printed.splitlines()
    assert lines[-2:] == [f"generated (base):    {base}", f"generated (ablated): {off}"]
    assert off != base  # the case at stake: this head changes the words
    # --all-heads: the base words once, and each changed head's own words (heads.parquet whole, the line cut)
    import pyarrow.parquet as pq

    from attnviz.corpus.ablate import cut_words

    flags = ["--text", src, "--generate", "8", "--all-heads", "--top", "36", "--out", str(tmp_path / "all")]
    rc, printed, err = _run(["ablate", str(demo), *flags], capsys)
    assert rc == 0, err
    lines = printed.splitlines()
    assert f"base generation: “{base}”" in lines
    row = next(r for r in pq.read_table(tmp_path / "all" / "heads.parquet").to_pylist()
               if (r["stack"], r["kind"], r["layer"], r["head"]) == ("decoder", "cross", 2, 1))  # fmt: skip
    assert row["generated"] == off and row["generation_changed"]
    said = next(line for line in lines if line.startswith("  decoder cross 2:1 "))
    assert said.endswith(f"generation → “{cut_words(off.split(' '))}”"), said


def test_the_base_prediction_is_said_of_one_row_not_of_row_0_of_a_batch(tmp_path):
    """--inputs with two rows: "base prediction: B" was row 0's alone, read as the batch's."""
    path = tiny_text_model(tmp_path / "m.onnx", layers=1, heads=2, d=8, seed=2)
    model = open_model(path, provider="cpu")
    labels = json.loads(next(p.value for p in onnx.load(path).metadata_props if p.key == "attnviz.labels"))
    one = np.array([[1, 3, 4, 5, 2]], np.int64)
    plain = _session(onnx.load(path)).run(["logits"], {"input_ids": one})[0]
    ab = Ablation(model, [0], "zero", AnalyzeRequest(feeds={"input_ids": one}))
    top = ab.top1(ab.base)
    assert (top.before, top.last_position) == (labels[int(plain[0].argmax())], False)  # onnxruntime's own label
    two = np.concatenate([one, one[:, ::-1]])
    ab = Ablation(model, [0], "zero", AnalyzeRequest(feeds={"input_ids": two}))
    assert ab.top1(ab.base) is None and ab.change({0: [1]}).positions == 2  # the rows still counted
