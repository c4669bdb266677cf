"""A generation's map rows written once, where they are read (``steps.Rows``; issue 26, the isolated path's cost).

Each step's rows go straight into one array per map output made for the whole generation (in the crash-isolation
child a slot of its shared memory), and only the generation's last reply names it: no stacked copy per chunk, no
slot per chunk, no parts for the parent to assemble.  Checked against rows laid out by hand and the chunk-by-chunk
stacking of before (``stack_rows``), the slot's life in the child request by request, and whole generations
against the full re-run (no cache: every map from one run of the whole sequence) and the in-process loop.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from test_host_slots import _cache_step_model, cache_step_plan

from attnviz.runtime import model_loop as model_module
from attnviz.runtime import open_model
from attnviz.runtime.isolation import INLINE_BYTES
from attnviz.runtime.steps import Rows, stack_rows
from attnviz.runtime.worker import Server


def _made():
    """A ``make`` for Rows that hands out fresh arrays with numbered tokens, and the list of tokens dropped."""
    tokens = iter(range(100))
    dropped: list[int] = []
    return (lambda shape: (np.full(shape, 7.0, np.float32), next(tokens))), dropped


@pytest.mark.parametrize("pad", [0.0, -np.inf])
def test_rows_lay_each_step_out_as_by_hand(pad):
    """Step i's row [1, 2, 1, 3 + i] lands at query i, its missing keys ``pad`` (the array starts dirty: a reused
    slot); a generation stopped early (EOS) gives the rows and keys written, nothing more."""
    rng = np.random.default_rng(0)
    steps = [rng.random((1, 2, 1, 3 + i), dtype=np.float32) for i in range(5)]
    make, dropped = _made()
    rows = Rows({"p": pad}, 8, make, dropped.append)
    for s in steps:
        rows.add("p", s)
    want = np.full((1, 2, 5, 7), pad, np.float32)
    for i, s in enumerate(steps):
        want[:, :, i, : 3 + i] = s[:, :, 0]
    got = rows.maps()["p"]
    np.testing.assert_array_equal(got, want)
    assert rows.arrays["p"].shape == (1, 2, 8, 10) and np.shares_memory(got, rows.arrays["p"])
    rows.close()
    assert dropped == [0] and not rows.arrays  # no reply named it: given back


def test_rows_past_the_upfront_budget_start_small_and_double():
    """A budget of two full-width rows: the array starts with room for 2 steps (and the 4 keys they see), doubles
    to 4, then to 8 (the generation's 8 steps), the rows so far copied over and each outgrown array given back;
    the rows equal the by-hand layout."""
    rng = np.random.default_rng(3)
    steps = [rng.random((1, 2, 1, 3 + i), dtype=np.float32) for i in range(7)]
    make, dropped = _made()
    rows = Rows({"p": 0.0}, 8, make, dropped.append)
    rows.UPFRONT_BYTES = 2 * 2 * 10 * 4  # two rows of [2 heads, 10 keys]
    sizes = []
    for s in steps:
        rows.add("p", s)
        sizes.append(rows.arrays["p"].shape[-2:])
    # the keys as far as the rows' steps see: 3 at the first, one more a step
    assert sizes == [(2, 4), (2, 4), (4, 6), (4, 6), (8, 10), (8, 10), (8, 10)] and dropped == [0, 1]
    want = np.zeros((1, 2, 7, 9), np.float32)
    for i, s in enumerate(steps):
        want[:, :, i, : 3 + i] = s[:, :, 0]
    np.testing.assert_array_equal(rows.maps()["p"], want)


def test_rows_that_stop_fitting_go_on_as_parts_as_before():
    """An empty first map (an ``If`` branch that did not run) and a row with more keys than a step adds: the
    output keeps its rows as parts from there, stacked as the chunked loop stacked them; the array it had is given
    back at once.  A map whose rows fit is unaffected."""
    rng = np.random.default_rng(1)
    make, dropped = _made()
    rows = Rows({"a": 0.0, "b": 0.0, "c": 0.0}, 4, make, dropped.append)
    a = [rng.random((1, 1, 1, 2 + i), dtype=np.float32) for i in range(4)]
    b = [np.zeros((0,), np.float32)] * 4
    c = [rng.random((1, 1, 1, k), dtype=np.float32) for k in (2, 3, 9, 10)]  # jumps past the foreseen 5 keys
    for i in range(4):
        rows.add("a", a[i])
        rows.add("b", b[i])
        rows.add("c", c[i])
    got = rows.maps()
    for name, parts in (("a", a), ("b", b), ("c", c)):
        np.testing.assert_array_equal(got[name], stack_rows(parts, 0.0), err_msg=name)
    assert got["c"].shape == (1, 1, 4, 10) and dropped == [1]  # a's array is token 0, c's token 1
    assert list(rows.arrays) == ["a"]


# --------------------------------------------------------------------------- in the child, request by request
def _steps(srv, sent, start, token, n, release=()):
    srv.handle("steps", (1, start, token, n, None, 0.0, list(release)))  # budget 0 s: one step a chunk
    status, reply = pickle.loads(sent[-1])
    assert status == "ok", reply
    return reply


def test_the_childs_rows_live_in_one_slot_named_by_the_last_reply(tmp_path):
    """The rows of a generation of 60 steps over a 300-key memory (over INLINE_BYTES) go into one slot taken at
    the first step: not free while the generation runs (free slots written over between chunks change nothing),
    named by the last reply alone with the rows and keys written, equal to the loop run in one chunk here.  A
    generation replaced before its end gives its slot back; the next one, after the parent hands the lent slot
    back, reuses it: no slot made after the first (nor trimmed as stale once handed back)."""
    from attnviz.runtime.steps import Loop, advance

    path = _cache_step_model(tmp_path / "step.onnx")
    srv = Server(None, str(tmp_path))
    sent: list[bytes] = []
    srv.send = sent.append
    srv.handle("create", (1, path.read_bytes(), {"provider": "cpu"}))
    rng = np.random.default_rng(2)
    feeds = {
        "input_ids": np.array([[3]]),
        "past": rng.standard_normal((1, 1, 2, 64)).astype(np.float32),
        "memory": rng.standard_normal((1, 1, 300, 64)).astype(np.float32),
    }
    n = 60
    import onnxruntime as ort

    local = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = advance(Loop(cache_step_plan(), {k: v.copy() for k, v in feeds.items()}, 2), 3, n, None, local.run, 60.0)
    assert want.maps["probs"].nbytes > INLINE_BYTES

    def generate(release=()):
        ids, _, names, items, _, created, _ = _steps(srv, sent, (cache_step_plan(), feeds, 2, None), 3, n, release)
        made = len(created)
        slot = srv.loops[1].rows.tokens["probs"]
        while len(ids) < n:
            assert names == [] and slot.id not in srv.pool.free
            for i in srv.pool.free:
                srv.pool.slots[i].view[:] = 255
            ids_, _, names, items, _, created, _ = _steps(srv, sent, None, ids[-1], n - len(ids))
            ids, made = ids + ids_, made + len(created)
        assert ids == want.ids and names == ["probs"] and 1 not in srv.loops
        item = items[0]
        # the keys stay 300 (cross-attention): the array foresaw one more a step, so the part written is named
        assert item[:2] == ("slot", slot.id) and item[4] == (n, 300)
        whole = srv.pool.slots[item[1]].array(np.dtype(item[2]), item[3])
        np.testing.assert_array_equal(whole[..., :n, :300], want.maps["probs"])
        return slot.id, made

    first, made = generate()
    assert made >= 1
    # the parent hands the slot back with its next request (a generation's prompt run; 60 requests after the
    # slot was taken: a slot's age counts from the reply that lent it, not from when the first step took it)
    srv.handle("run", (1, ["logits"], {k: v.copy() for k, v in feeds.items()}, [first]))
    assert pickle.loads(sent[-1])[0] == "ok" and first in srv.pool.free
    _steps(srv, sent, (cache_step_plan(), feeds, 2, None), 3, n)  # a generation replaced after a chunk
    taken = srv.loops[1].rows.tokens["probs"].id
    again, made = generate()
    assert taken == first == again  # handed back, taken, given back when replaced, taken again
    assert made == 0  # no slot made


# --------------------------------------------------------------------------- whole generations
@pytest.mark.slow
def test_a_long_generation_stopped_by_eos_equals_the_full_rerun_and_the_in_process_loop(optimum_export, monkeypatch):
    """GPT-2 (optimum's with-past file), one step a chunk, in the child: 100 tokens' rows (over INLINE_BYTES) go
    into a slot; an EOS met half-way leaves part of it unwritten.  The maps equal the full re-run's (each from one
    run of the whole sequence, no cache) and the in-process loop's bit for bit."""
    monkeypatch.setattr(model_module, "CHUNK_S", 0.0)
    path = optimum_export("gpt2") / "onnx"
    prompt = np.array([[3, 4, 5]])
    feeds = {"input_ids": prompt, "attention_mask": np.ones_like(prompt)}
    m = open_model(path, provider="cpu")
    m.meta["special"] = {k: v for k, v in m.meta["special"].items() if k != "eos"}
    ids = m.analyze(feeds=feeds, generate=100).info["generated_ids"]
    eos = next(t for i, t in enumerate(ids) if i >= 20 and t not in ids[:i])  # a token first made after step 20
    m.meta["special"]["eos"] = eos
    r = m.analyze(feeds=feeds, generate=100)
    got = r.info["generated_ids"]
    assert 20 < len(got) < 100 and got[-1] == eos and got == ids[: len(got)]
    heads = r.maps[0].shape[1]
    assert heads * 100 * (3 + 100) * 4 > INLINE_BYTES  # the rows array the child made: a slot
    full = m.analyze(feeds=feeds, generate=100, use_cache=False)
    assert full.info["generated_ids"] == got
    for a, b in zip(r.maps, full.maps):
        assert a.shape == b.shape == (1, heads, 2 + len(got), 2 + len(got))
        np.testing.assert_allclose(a.array(), b.array(), atol=1e-5)
    monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    here = open_model(path, provider="cpu")
    here.meta["special"] = dict(m.meta["special"])
    h = here.analyze(feeds=feeds, generate=100)
    assert h.info["generated_ids"] == got
    for a, b in zip(r.maps, h.maps):
        np.testing.assert_array_equal(a.array(), b.array())
