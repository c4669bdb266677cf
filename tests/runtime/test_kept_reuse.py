"""An isolated run that keeps outputs on the device (runtime/kept.py) keeps its I/O binding: each kept output
stays bound to the value its last run left there, written again in place once the parent dropped that value
(no allocation, no rebinding, and the reply pickled before the run goes out the moment onnxruntime returns),
bound anew where the parent may still read it (worker.py ``_run``, ``_Held``).  Every value is checked against
the numbers it must hold (the graph's own arithmetic, numpy; or the host recompute of the maps), so a value
overwritten while still held, or a stale one, would show."""

import gc
import pickle

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx_builders import tiny_text_model

from attnviz.runtime import host
from attnviz.runtime import model as rm

# gc.collect() here frees what each test made; not a traversal of the whole suite's heap (conftest.py)
pytestmark = pytest.mark.usefixtures("young_gc")

# the kept maps are onnxruntime's float32 softmax, the host's recompute numpy's (test_ondemand_kept.py: equal
# within 1e-6); the isolated and in-process kept maps are the same computation and must agree bit for bit
TOL = 1e-6


def _kept_model(path):
    """x [n, 128] float, e [1] int64 -> h = relu(x) (a slot: > 64 kB from n = 129), q = -x, k = x[:, :e]
    (kept; k's shape follows e's value, which no feed dimension predicts)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 128])
    e = helper.make_tensor_value_info("e", TensorProto.INT64, [1])
    outs = [
        helper.make_tensor_value_info("h", TensorProto.FLOAT, ["n", 128]),
        helper.make_tensor_value_info("q", TensorProto.FLOAT, ["n", 128]),
        helper.make_tensor_value_info("k", TensorProto.FLOAT, ["n", "m"]),
    ]
    nodes = [
        helper.make_node("Relu", ["x"], ["h"]),
        helper.make_node("Neg", ["x"], ["q"]),
        helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("z", TensorProto.INT64, [1], [0])),
        helper.make_node("Constant", [], ["one"], value=helper.make_tensor("o", TensorProto.INT64, [1], [1])),
        helper.make_node("Slice", ["x", "zero", "e", "one"], ["k"]),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "kept", [x, e], outs), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_kept_values_are_written_in_place_only_once_the_parent_dropped_them(tmp_path):
    from attnviz.runtime.worker import Server, _Held

    srv = Server(None, str(tmp_path))
    sent: list[bytes] = []
    srv.send = sent.append
    srv.create(1, _kept_model(tmp_path / "k.onnx").read_bytes(), {"provider": "cpu", "keep": (["q", "k"], "on")})
    rng = np.random.default_rng(3)
    held: dict[int, np.ndarray] = {}  # kept id -> the numbers the parent expects it to hold still
    release: list[int] = []

    def run(n: int, m: int, drop: list[int]) -> tuple[dict, np.ndarray]:
        nonlocal release
        x = rng.standard_normal((n, 128)).astype(np.float32)
        srv.handle("forget_then", (drop, "run", (1, ["h", "q", "k"], {"x": x, "e": np.array([m])}, release)))
        status, (items, _, _) = pickle.loads(sent.pop())
        assert status == "ok" and not sent
        h, q, k = items
        assert h[0] == "slot" and q[0] == k[0] == "kept" and k[3] == (n, m)
        np.testing.assert_array_equal(srv.pool.slots[h[1]].array(np.dtype(h[2]), h[3]), np.maximum(x, 0))
        release = [h[1]]
        for kid in drop:
            held.pop(kid)
        held[q[1]], held[k[1]] = -x, x[:, :m]
        for kid, want in held.items():  # this run's values, and every value the parent still holds, untouched
            np.testing.assert_array_equal(srv.kept[kid].numpy(), want)
        assert srv.kept_count() == len(held)
        return {"q": q[1], "k": k[1]}, x

    def bound(name: str):
        mark = srv.bindings[1].outs[name]
        return mark.value if type(mark) is _Held else None

    first, _ = run(200, 5, [])  # nothing learned yet: onnxruntime allocates, no binding kept
    second, _ = run(200, 5, [*first.values()])  # the binding is made, the outputs bound empty
    value = bound("q")
    assert srv.kept[second["q"]] is value
    third, _ = run(200, 5, [])  # the second still held: its values must not be written again
    assert bound("q") is srv.kept[third["q"]] is not value
    value = bound("q")
    fourth, _ = run(200, 5, [*second.values(), *third.values()])  # both dropped: the third's written in place
    assert srv.kept[fourth["q"]] is value and bound("q") is value
    assert srv.replied  # the reply went out from inside the run, pickled before it
    fifth, _ = run(300, 5, list(fourth.values()))  # a longer input: q's shape changed, a new value
    assert srv.kept[fifth["q"]] is not value
    sixth, _ = run(300, 7, list(fifth.values()))  # k's width follows e's value: predicted 5, refused, run again
    seventh, _ = run(300, 7, [])  # the sixth held
    run(300, 7, [*sixth.values(), *seventh.values()])
    srv.forget(list(held))
    held.clear()
    assert srv.kept_count() == 0


def test_isolated_kept_runs_equal_in_process_and_the_host_recompute(tmp_path, monkeypatch):
    """Through the crash-isolation child: runs whose result is dropped before the next (written in place), held
    (bound anew), and of another length (1,400, 1,460, 1,400 tokens); each against the same runs in this process and the
    host recompute, and every kept value dropped in the child once its result is."""
    # over 1,365 tokens: the logits (not kept: [1, T, 12] float32) are over the inline size, so they go into a
    # slot and every output of the run is a slot or kept (the binding kept across runs); below they are pickled
    path = tiny_text_model(tmp_path / "lm.onnx", classifier=False, heads=2, d=16, causal=True)
    rng = np.random.default_rng(5)
    # each run its own tokens (a value written while still held would show), two lengths
    inputs = [rng.integers(3, 12, (1, t)) for t in (1400, 1400, 1400, 1460, 1460, 1400, 1400)]
    hold = {1, 4}  # these results are held while later runs (of their length) run

    def runs(mode: str) -> list:
        monkeypatch.setenv("ATTNVIZ_QK_DEVICE", mode)
        m = rm.open_model(path, provider="cpu")
        got, kept = [], []
        for i, ids in enumerate(inputs):
            r = m.run({"input_ids": ids}, mode="ondemand")
            got.append([[s.head(0, h) for h in range(2)] for s in r.maps])
            if i in hold:
                kept.append(r)
            del r
            gc.collect()
        for r, i in zip(kept, sorted(hold)):  # held results still draw what they drew when they came
            np.testing.assert_array_equal(np.array([[s.head(0, h) for h in range(2)] for s in r.maps]), got[i])
        return got, kept

    want, _ = runs("off")  # Q and Kᵀ to the host, maps recomputed there
    isolated, kept = runs("on")
    monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    inproc, _ = runs("on")
    monkeypatch.delenv("ATTNVIZ_INPROCESS")
    for i, (w, a, b) in enumerate(zip(want, isolated, inproc)):
        for s, (ws, as_, bs) in enumerate(zip(w, a, b)):
            for h in range(2):
                np.testing.assert_array_equal(as_[h], bs[h], err_msg=f"run {i} site {s} head {h}")
                np.testing.assert_allclose(as_[h], ws[h], atol=TOL, rtol=0, err_msg=f"run {i} site {s}")
    child = host._host
    refs = {v.kid for r in kept for m in r.maps for v in (m.q, m.k, *m.side_kept.values())}
    assert child is not None and child.kept_count() == len(refs) >= 2 * 2 * len(kept)  # Q, Kᵀ per site, a mask
    del kept
    gc.collect()
    assert child.kept_count() == 0


def test_a_repeated_isolated_run_goes_as_again_and_equals_in_process(tmp_path, monkeypatch):
    """Runs of one length whose result is dropped before the next go as the parent's "again" and repeat in the
    child (child.ChildProcess.run, worker.Server._repeat): their kept values carry the ids this process gave
    (negative: the child's own count up from 1), their outputs made here while the child ran.  Each run its own
    tokens, so a stale slot or kept value (a repeat that did not run, or wrote over a result still held) shows
    against the same tokens in this process: every head and the logits equal, a held result still draws its own."""
    host.shutdown()  # a fresh child: no slot trims of earlier tests pending (a repeat waits for them to be told)
    path = tiny_text_model(tmp_path / "lm.onnx", classifier=False, heads=2, d=16, causal=True)
    rng = np.random.default_rng(7)
    inputs = [rng.integers(3, 12, (1, 1400)) for _ in range(6)]  # logits over the inline size: a slot

    def runs() -> tuple[list, list, list[list[int]], object]:
        m = rm.open_model(path, provider="cpu")
        heads, logits, kids, held = [], [], [], None
        for i, ids in enumerate(inputs):
            r = m.run({"input_ids": ids}, mode="ondemand")
            heads.append([[s.head(0, h) for h in range(2)] for s in r.maps])
            logits.append(np.array(next(iter(r.outputs.values()))))
            kids.append([getattr(v, "kid", 0) for s in r.maps for v in (s.q, s.k)])  # in process: no ids
            if i == 2:  # its maps (Q and Kᵀ) held across the next runs of its length, its logits' slot handed back
                held = r.maps
            del r
            gc.collect()
        return heads, logits, kids, held

    monkeypatch.setenv("ATTNVIZ_QK_DEVICE", "on")
    heads, logits, kids, held = runs()
    again = [i for i, k in enumerate(kids) if all(kid < 0 for kid in k)]
    # 0 planned (nothing learned), 1 the first reply sent ahead (the child's repeat set), 2 repeated, 3 not (2 is
    # held: its values are not written over, the kept outputs bound anew), 4 and 5 repeated (3 dropped)
    assert again == [2, 4, 5], kids
    assert all(kid > 0 for i in (0, 1, 3) for kid in kids[i])
    mine = np.array([[s.head(0, h) for h in range(2)] for s in held])
    monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    want_heads, want_logits, _, _ = runs()
    np.testing.assert_array_equal(mine, want_heads[2])  # the held result, after runs 3-5 of its length
    for i in range(len(inputs)):
        np.testing.assert_array_equal(np.array(heads[i]), np.array(want_heads[i]), err_msg=f"run {i}")
        np.testing.assert_array_equal(logits[i], want_logits[i], err_msg=f"run {i}")
    child = host._host
    assert child is not None and child.kept_count() == len(held) * 2 + 1  # Q, Kᵀ per site, the mask
    del held
    gc.collect()
    assert child.kept_count() == 0


def test_a_child_killed_during_a_repeated_run_is_one_crash_and_the_next_run_starts_anew(tmp_path, monkeypatch):
    """The child killed right after the parent's "again" went out (its outputs being made here meanwhile): the run
    ends in ModelCrashed with the child's death in one line, and a run in a fresh child (the model opened again:
    one that crashed stays refused) draws the heads of its own tokens (against the same tokens in this process)."""
    import os
    import signal

    from attnviz.runtime.child import ModelCrashed

    monkeypatch.setenv("ATTNVIZ_QK_DEVICE", "on")
    host.shutdown()  # a fresh child (see above)
    path = tiny_text_model(tmp_path / "lm.onnx", classifier=False, heads=2, d=16, causal=True)
    rng = np.random.default_rng(11)
    inputs = [rng.integers(3, 12, (1, 1400)) for _ in range(4)]
    m = rm.open_model(path, provider="cpu")
    for i, ids in enumerate(inputs[:3]):  # the third repeats: the fourth goes as "again", its outputs made ahead
        r = m.run({"input_ids": ids}, mode="ondemand")
        assert all(v.kid < 0 for s in r.maps for v in (s.q, s.k)) == (i == 2)
        del r
        gc.collect()
    child = host._host
    assert child is not None
    sent = child.write

    def write_then_kill(data: bytes) -> None:
        sent(data)
        assert pickle.loads(data)[0] == "forget_then" and pickle.loads(data)[1][1] == "again"
        os.kill(child.proc.pid, signal.SIGKILL)

    child.write = write_then_kill
    with pytest.raises(ModelCrashed) as e:
        m.run({"input_ids": inputs[3]}, mode="ondemand")
    assert str(e.value).startswith("the model crashed onnxruntime: the process was killed by SIGKILL while running")
    assert "\n" not in str(e.value)
    with pytest.raises(ModelCrashed, match="^the model crashed onnxruntime: the process was killed by SIGKILL"):
        m.run({"input_ids": inputs[3]}, mode="ondemand")  # the model that crashed stays refused, in the same words
    got = rm.open_model(path, provider="cpu").run({"input_ids": inputs[3]}, mode="ondemand")  # opened again
    assert host._host is not child and all(v.kid > 0 for s in got.maps for v in (s.q, s.k))
    heads = np.array([[s.head(0, h) for h in range(2)] for s in got.maps])
    monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    want = rm.open_model(path, provider="cpu").run({"input_ids": inputs[3]}, mode="ondemand")
    np.testing.assert_array_equal(heads, np.array([[s.head(0, h) for h in range(2)] for s in want.maps]))
    del got
    gc.collect()
    assert host._host.kept_count() == 0  # the fresh child dropped what it kept once the result went
