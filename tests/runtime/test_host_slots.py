"""Crash isolation without copies: maps come back in shared-memory slots the child reuses (runtime/worker.py).

The ownership rule under test: a slot is the caller's while any array viewing it is alive, and the child writes
only into slots handed back.  Values are checked against in-process onnxruntime and numpy; timing and memory are
in bench/engine_memory_bench.py."""

from __future__ import annotations

import gc
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx_builders import tiny_text_model

from attnviz.runtime import host, open_model
from attnviz.runtime.isolation import INLINE_BYTES
from attnviz.runtime.worker import KEEP_RUNS, ShapeLinks, _slot_size

# gc.collect() here frees what each test made; not a traversal of the whole suite's heap (conftest.py)
pytestmark = pytest.mark.usefixtures("young_gc")

IDS_A = np.array([[1] + [3, 4, 5, 6, 7] * 40 + [2]], np.int64)  # 202 tokens: 320 kB per map, > INLINE_BYTES
IDS_B = np.array([[1] + [7, 6, 5, 4, 3] * 40 + [2]], np.int64)


@pytest.fixture
def models(tmp_path, monkeypatch):
    path = tiny_text_model(tmp_path / "tiny.onnx", d=16, heads=2)
    remote = open_model(path, provider="cpu")
    monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    local = open_model(path, provider="cpu")
    local.run({"input_ids": IDS_A[:, :8]}, mode="dense")  # sessions are made on first run: in-process here
    monkeypatch.delenv("ATTNVIZ_INPROCESS")
    return remote, local


def _arrays(result):
    return [m.array() for m in result.maps]


def test_held_map_is_never_overwritten_by_later_runs(models):
    remote, local = models
    held = remote.run({"input_ids": IDS_A}, mode="dense")
    want_a = [a.copy() for a in _arrays(held)]
    head = held.maps[1].head(0, 1)  # a view of a view: it alone must keep its slot
    head_a = head.copy()
    assert held.maps[0].array().nbytes > INLINE_BYTES
    for ids in (IDS_B, IDS_B, IDS_A, IDS_B):  # same shapes: the child binds onnxruntime's outputs to free slots
        r = remote.run({"input_ids": ids}, mode="dense")
        for a, b in zip(_arrays(r), _arrays(local.run({"input_ids": ids}, mode="dense"))):
            np.testing.assert_array_equal(a, b)
        del r
        gc.collect()
        for a, w in zip(_arrays(held), want_a):
            np.testing.assert_array_equal(a, w)
    assert not np.array_equal(want_a[1], _arrays(local.run({"input_ids": IDS_B}, mode="dense"))[1])
    del held
    gc.collect()
    for ids in (IDS_B, IDS_B):  # the held result is gone: its slots may be reused, the head view's may not
        remote.run({"input_ids": ids}, mode="dense")
        gc.collect()
        np.testing.assert_array_equal(head, head_a)


def test_dropped_results_hand_their_slots_back(models):
    remote, _ = models
    host.shutdown()  # a fresh child: slots that earlier tests' runs left to age out would go mid-count
    seen = []
    for _ in range(KEEP_RUNS + 4):  # a slot left over from the first runs goes after KEEP_RUNS runs unused
        r = remote.run({"input_ids": IDS_A}, mode="dense")
        del r
        gc.collect()
        seen.append(sorted(host._host.maps))
    # after the first runs the same slots go round: nothing grows however many runs follow
    assert seen[-1] == seen[-2] == seen[-3]
    slots = [f for f in os.listdir(host._host.outdir) if f.startswith("slot-")]  # (feeds-N: the parent's feed area)
    assert len(slots) == len(seen[-1]) <= 2 * 2  # 2 maps a run (logits go inline)


def test_maps_held_when_the_child_dies_stay_readable(models):
    remote, local = models
    held = remote.run({"input_ids": IDS_A}, mode="dense")
    want = [a.copy() for a in _arrays(held)]
    host.shutdown()  # kills the child and deletes its folder
    for a, w in zip(_arrays(held), want):
        np.testing.assert_array_equal(a, w)
    again = remote.run({"input_ids": IDS_B}, mode="dense")  # a fresh child
    for a, b in zip(_arrays(again), _arrays(local.run({"input_ids": IDS_B}, mode="dense"))):
        np.testing.assert_array_equal(a, b)
    for a, w in zip(_arrays(held), want):
        np.testing.assert_array_equal(a, w)


def _tile_softmax_model(path):
    """y = softmax(tile(x, [reps, 1])): the output's shape depends on a feed's *value*, not only its shape."""
    g = helper.make_graph(
        [
            helper.make_node("Concat", ["reps", "one"], ["r2"], axis=0),
            helper.make_node("Tile", ["x", "r2"], ["t"]),
            helper.make_node("Softmax", ["t"], ["y"], axis=-1),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 300]),
            helper.make_tensor_value_info("reps", TensorProto.INT64, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("one", TensorProto.INT64, [1], [1])],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def test_a_wrong_learned_shape_costs_a_rerun_never_a_wrong_value(tmp_path):
    sess, _ = host.make_session(str(_tile_softmax_model(tmp_path / "tile.onnx")), "cpu")
    x = np.random.default_rng(0).standard_normal((64, 300)).astype(np.float32)
    e = np.exp(x - x.max(-1, keepdims=True))
    want = e / e.sum(-1, keepdims=True)
    held = []
    for reps in (1, 2, 2, 1, 3, 1):  # same feed shapes each time; the learned shape is wrong at every change
        (y,) = sess.run(None, {"x": x, "reps": np.array([reps], np.int64)})
        assert y.shape == (64 * reps, 300) and y.nbytes > INLINE_BYTES
        np.testing.assert_allclose(y, np.tile(want, (reps, 1)), rtol=1e-6, atol=1e-7)
        held.append(y)
    for reps, y in zip((1, 2, 2, 1, 3, 1), held):
        np.testing.assert_allclose(y, np.tile(want, (reps, 1)), rtol=1e-6, atol=1e-7)


def test_shape_links_follow_feed_dimensions_and_keep_constants():
    links = ShapeLinks()
    f16 = links.dims({"ids": np.zeros((1, 16))})
    links.learn(f16, "p", np.zeros((1, 16, 16, 16), np.float32))  # 16 heads and 16 tokens: ambiguous at first
    f20 = links.dims({"ids": np.zeros((1, 20))})
    assert links.predict(f20, "p") == (np.dtype(np.float32), (1, 20, 20, 20))  # a guess; a second run corrects
    links.learn(f20, "p", np.zeros((1, 16, 20, 20), np.float32))
    f7 = links.dims({"ids": np.zeros((2, 7))})
    assert links.predict(f7, "p") == (np.dtype(np.float32), (2, 16, 7, 7))
    assert links.predict(f7, "never seen") is None


def test_slot_sizes_waste_at_most_an_eighth():
    for n in (1, 65_537, 320_000, 12_582_912, 75_497_472, 10**9 + 7):
        s = _slot_size(n)
        assert n <= s and s % (1 << 16) == 0
        assert s - n < max(1 << 16, n / 8)


def test_the_child_does_not_load_onnx(models):
    remote, _ = models
    remote.run({"input_ids": IDS_A[:, :8]}, mode="dense")
    pid = host._host.proc.pid
    with open(f"/proc/{pid}/maps") as f:
        maps = f.read()
    assert "onnxruntime_pybind11_state" in maps  # the child does run onnxruntime...
    assert "onnx_cpp2py_export" not in maps  # ...but never imported onnx (the engine's package init)


def test_an_output_fetched_twice_is_one_slot_released_once(tmp_path):
    sess, _ = host.make_session(str(_tile_softmax_model(tmp_path / "tile.onnx")), "cpu")
    x = np.random.default_rng(1).standard_normal((64, 300)).astype(np.float32)
    one = {"x": x, "reps": np.array([1], np.int64)}
    a, b = sess.run(["y", "y"], one)
    want = a.copy()
    del a  # b views the same slot: it must stay the caller's
    gc.collect()
    for _ in range(3):
        sess.run(["y"], {"x": -x, "reps": np.array([1], np.int64)})
        gc.collect()
        np.testing.assert_array_equal(b, want)


def _double_model(path, n=300):
    """y = x * 2 on float[rows, n]: a feed over INLINE_BYTES from 55 rows on."""
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["r", n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def test_large_feeds_go_through_the_shared_feed_area_and_are_never_mixed_up(tmp_path):
    sess, _ = host.make_session(str(_double_model(tmp_path / "double.onnx")), "cpu")
    rng = np.random.default_rng(5)
    held = []
    for rows in (64, 64, 200, 64, 700):  # the area grows for 200 and 700 rows (a new file), is reused between
        x = rng.standard_normal((rows, 300)).astype(np.float32)
        x_before = x.copy()
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_array_equal(y, 2 * x)
        np.testing.assert_array_equal(x, x_before)  # the caller's array is read, never written
        held.append((x, y))
    areas = [f for f in os.listdir(host._host.outdir) if f.startswith("feeds-")]
    assert len(areas) == 1  # a large feed did travel through shared memory; only the newest area is kept
    for x, y in held:  # later feeds rewrote the area: results from earlier runs are their own slots
        np.testing.assert_array_equal(y, 2 * x)
    (y,) = sess.run(None, {"x": np.asfortranarray(held[2][0])})  # any memory layout is copied in as C order
    np.testing.assert_array_equal(y, 2 * held[2][0])


def test_the_child_reuses_its_io_binding_and_never_returns_a_stale_output(tmp_path):
    """A session whose outputs all went into slots keeps its I/O binding; the next run on the same shapes
    rebinds only the feeds (and any output whose slot changed).  Values change every run, so a stale binding
    (an output left pointing at a slot still lent) would show."""
    from attnviz.runtime.worker import Server

    srv = Server(None, str(tmp_path))
    srv.create(1, _double_model(tmp_path / "double.onnx").read_bytes(), {"provider": "cpu"})
    rng = np.random.default_rng(6)
    ios, held, release = [], [], []
    for i in range(6):
        x = rng.standard_normal((64, 300)).astype(np.float32)
        (item,), _, _ = srv.run(1, ["y"], {"x": x}, release)
        assert item[0] == "slot"
        y = srv.pool.slots[item[1]].array(np.dtype(item[2]), item[3])
        np.testing.assert_array_equal(y, 2 * x)
        if i % 3 == 2:  # hold this result: its slot stays lent, the next run must bind another
            held.append((item[1], y.copy()))
            release = []
        else:
            release = [item[1]]
        ios.append(srv.bindings.get(1) and srv.bindings[1].io)
    assert ios[0] is None  # the first run learned the shape: onnxruntime allocated the output
    assert ios[1] is not None and all(io is ios[1] for io in ios[2:])
    for slot, want in held:
        np.testing.assert_array_equal(srv.pool.slots[slot].array(np.dtype(np.float32), want.shape), want)


def test_feeds_in_the_feed_area_keep_their_binding_and_are_never_stale(tmp_path, monkeypatch):
    """Feeds travel through the parent's feed area; a run on the same shapes puts them at the same place, so the
    child's kept binding is not rebound (counted) and still reads this run's values.  When the area grows (a new
    file), a session bound to the old one rebinds: its next run must read the new values, not the old file's."""
    import onnxruntime as ort

    from attnviz.runtime.worker import Server

    binds = []
    plain_bind = ort.IOBinding.bind_cpu_input
    monkeypatch.setattr(ort.IOBinding, "bind_cpu_input", lambda io, k, v: (binds.append(k), plain_bind(io, k, v)))
    area = host._FeedArea(str(tmp_path))
    srv = Server(None, str(tmp_path))
    model = _double_model(tmp_path / "double.onnx").read_bytes()
    srv.create(1, model, {"provider": "cpu"})
    srv.create(2, model, {"provider": "cpu"})
    rng = np.random.default_rng(7)

    def run(sid, rows, release):
        x = rng.standard_normal((rows, 300)).astype(np.float32)
        (item,), _, _ = srv.run(sid, ["y"], area.share({"x": x}), release)
        np.testing.assert_array_equal(srv.pool.slots[item[1]].array(np.dtype(item[2]), item[3]), 2 * x)
        return [item[1]]

    release = run(1, 64, [])  # learns the output shape
    release = run(1, 64, release)  # binds the kept binding's feed
    before = len(binds)
    for _ in range(4):
        release = run(1, 64, release)
    assert len(binds) == before  # same place, same shape: never rebound, and every value above was fresh
    first_file = area.file
    other = run(2, 900, [])  # another session's larger feed grows the area: a new file
    assert area.file != first_file
    for _ in range(3):  # session 1's binding points into the old file: it must rebind once and read anew
        release = run(1, 64, release)
    assert len(binds) == before + 2  # session 2's first run, then session 1's rebinding
    run(2, 900, other)


def test_a_repeated_run_goes_out_unplanned_and_reads_each_runs_feeds(tmp_path, monkeypatch):
    """Requests handled as the child's loop handles them: once a session's outputs are all predicted, a run on
    feeds at the same places with its slots handed back repeats the kept binding and the same reply, without
    planning (counted).  Each reply must still hold this run's values; a result held, a new shape or a grown
    feed area each takes the planned path, and the values stay right across the switches."""
    import pickle

    from attnviz.runtime.worker import Server

    area = host._FeedArea(str(tmp_path))
    srv = Server(None, str(tmp_path))
    sent: list[bytes] = []
    srv.send = sent.append
    srv.handle("create", (1, _double_model(tmp_path / "double.onnx").read_bytes(), {"provider": "cpu"}))
    assert pickle.loads(sent[-1])[0] == "ok"
    repeats = []
    plain_repeat = srv._repeat
    monkeypatch.setattr(srv, "_repeat", lambda *a: repeats.append(plain_repeat(*a)) or repeats[-1])
    rng = np.random.default_rng(8)
    held = []

    def run(rows, release):
        x = rng.standard_normal((rows, 300)).astype(np.float32)
        n = len(sent)
        srv.handle("run", (1, ["y", "y"], area.share({"x": x}), release))
        assert len(sent) == n + 1  # exactly one reply a request
        status, (items, created, deleted) = pickle.loads(sent[-1])
        assert status == "ok" and items[0] == items[1]
        y = srv.pool.slots[items[0][1]].array(np.dtype(items[0][2]), items[0][3])
        np.testing.assert_array_equal(y, 2 * x)
        return x, y, [items[0][1]]

    release: list[int] = []
    for _ in range(5):
        _, _, release = run(64, release)
    # the first run learns the shape (nothing to repeat yet), the second plans its slot; then it only repeats
    assert repeats == [True, True, True]
    x, y, _ = run(64, release)  # held: its slot stays lent, so the next run must plan into another
    held.append((x, y.copy(), y))
    _, _, release = run(64, [])
    _, _, release = run(80, release)  # a new shape
    _, _, release = run(900, release)  # grows the feed area: a new file
    for _ in range(KEEP_RUNS + 1):
        _, _, release = run(900, release)
    # the held run repeats; the next cannot (its slot is lent), nor a new shape or a new area; then it repeats,
    # except once: the slots of the old shapes, trimmed after KEEP_RUNS runs unused, are reported by a planned reply
    assert repeats[3:] == [True, False, False, False] + [True] * (KEEP_RUNS - 1) + [False, True]
    for _x, copy, view in held:  # the held result was never written over
        np.testing.assert_array_equal(view, copy)


def test_two_threads_sharing_the_child_never_see_a_slot_handed_back_twice(models):
    """Slots go back inside a run request, under the host's lock: two threads running and holding results
    at once must still each see their own values, run after run."""
    import threading

    remote, local = models
    want = {k: _arrays(local.run({"input_ids": ids}, mode="dense")) for k, ids in (("a", IDS_A), ("b", IDS_B))}
    errors = []

    def work(key, ids):
        try:
            prev = None
            for _ in range(8):
                r = remote.run({"input_ids": ids}, mode="dense")
                for a, b in zip(_arrays(r), want[key]):
                    np.testing.assert_array_equal(a, b)
                if prev is not None:
                    for a, b in zip(_arrays(prev), want[key]):
                        np.testing.assert_array_equal(a, b)
                prev = r  # held while the next run goes (the one before is dropped)
                gc.collect()
        except Exception as e:  # reported below: an assertion in a thread would be lost
            errors.append(e)

    threads = [threading.Thread(target=work, args=k) for k in (("a", IDS_A), ("b", IDS_B))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_repeated_dimensions_reuse_the_last_shapes_and_a_changed_shape_is_learned():
    links = ShapeLinks()
    d8 = links.dims({"ids": np.zeros((1, 8))})
    links.learn_all(d8, {"p": np.zeros((1, 2, 8, 8), np.float32)})
    assert links.predict_all(d8, ["p"]) == {"p": (np.dtype(np.float32), (1, 2, 8, 8))}
    d9 = links.dims({"ids": np.zeros((1, 9))})
    assert links.predict_all(d9, ["p", "q"]) == {"p": (np.dtype(np.float32), (1, 2, 9, 9)), "q": None}
    links.learn_all(d8, {"p": np.zeros((1, 3, 8, 8), np.float32)})  # a value-dependent shape changed
    assert links.predict_all(d8, ["p"]) == {"p": (np.dtype(np.float32), (1, 3, 8, 8))}  # the memo follows
    assert links.predict_all(d9, ["p"]) == {"p": None}  # dim 1 is no constant any more: no guess at all


def test_every_kind_of_feed_goes_through_the_feed_area(tmp_path):
    """Every numpy feed now travels through the feed area, whatever its dtype and shape: float16, a 0-d scalar,
    bool, a zero-size tensor (an empty cache), between runs that grow the area; each run's output is checked by
    hand (y = float(x) * s + b + the sum of e's shape, 0 + 3)."""
    g = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["xf", "s"], ["y0"]),
            helper.make_node("Cast", ["b"], ["bf"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["y0", "bf"], ["y1"]),
            helper.make_node("Shape", ["e"], ["es"]),
            helper.make_node("Cast", ["es"], ["esf"], to=TensorProto.FLOAT),
            helper.make_node("ReduceSum", ["esf"], ["n"], keepdims=0),
            helper.make_node("Add", ["y1", "n"], ["y"]),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["n"]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
            helper.make_tensor_value_info("b", TensorProto.BOOL, [1]),
            helper.make_tensor_value_info("e", TensorProto.FLOAT, ["z", 3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    path = tmp_path / "kinds.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    sess, _ = host.make_session(str(path), "cpu")
    for i, n in enumerate((5, 5, 40000, 5, 5)):  # 40000 float16 values grow the area: a new file, then back
        x = (np.arange(n) % 97 * (i + 1)).astype(np.float16)
        feeds = {
            "x": x,
            "s": np.full((), 2.0 + i, np.float32),
            "b": np.array([i % 2 == 0]),
            "e": np.zeros((0, 3), np.float32),
        }
        (y,) = sess.run(None, feeds)
        np.testing.assert_array_equal(y, x.astype(np.float32) * np.float32(2.0 + i) + (i % 2 == 0) + 3)


def cache_step_plan(**changes):
    """The step loop's plan for :func:`_cache_step_model`: ``past`` carried from ``present``, ``probs`` the map
    (``changes``: fields set otherwise, e.g. ``device``)."""
    from attnviz.runtime.steps import StepPlan

    plan = dict(
        fetch=("logits", "present", "probs"),
        logits="logits",
        carry=(("past", "present"),),
        token="input_ids",
        maps=(("probs", 0.0),),
        dtypes=(("input_ids", "int64"), ("past", "float32"), ("memory", "float32")),
    )
    return StepPlan(**{**plan, **changes})


def _cache_step_model(path, vocab=50, d=64, seed=3):
    """One cached decoder step, shaped as Whisper's: the token's embedding ``q`` joins the self-attention cache
    (``present = past ++ q``, carried to the next step) and attends over ``memory``, the encoder's half of the
    cache that no step changes (``probs``, the map); the attended row picks the next token.  float[1, 1, T, 64]
    is over INLINE_BYTES from 257 rows on."""
    rng = np.random.default_rng(seed)
    g = helper.make_graph(
        [
            helper.make_node("Gather", ["E", "input_ids"], ["e"]),
            helper.make_node("Reshape", ["e", "qshape"], ["q"]),
            helper.make_node("Concat", ["past", "q"], ["present"], axis=2),
            helper.make_node("Transpose", ["memory"], ["kt"], perm=[0, 1, 3, 2]),
            helper.make_node("MatMul", ["q", "kt"], ["scores"]),
            helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
            helper.make_node("MatMul", ["probs", "memory"], ["ctx"]),
            helper.make_node("ReduceMean", ["present"], ["selfmean"], axes=[2]),
            helper.make_node("Add", ["ctx", "selfmean"], ["mixed"]),
            helper.make_node("Reshape", ["mixed", "lshape"], ["flat"]),
            helper.make_node("MatMul", ["flat", "W"], ["logits"]),
        ],
        "g",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, 1]),
            helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, 1, "t", d]),
            helper.make_tensor_value_info("memory", TensorProto.FLOAT, [1, 1, "m", d]),
        ],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("logits", "present", "probs")],
        [
            helper.make_tensor("E", TensorProto.FLOAT, [vocab, d], rng.standard_normal(vocab * d).tolist()),
            helper.make_tensor("W", TensorProto.FLOAT, [d, vocab], rng.standard_normal(d * vocab).tolist()),
            helper.make_tensor("qshape", TensorProto.INT64, [4], [1, 1, 1, d]),
            helper.make_tensor("lshape", TensorProto.INT64, [3], [1, 1, d]),
        ],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return path


def test_a_generation_reads_its_cache_from_the_childs_own_slot_and_keeps_it_past_the_chunk(tmp_path):
    """A start feed that is one of the child's slots lent to the parent (SlotFeed: a decoder's presents fed
    back as the cache) is read in place; when the loop goes on past the chunk it keeps a copy of what no step
    replaced (the encoder's half), so the slot being handed back and written over between chunks changes
    nothing.  Ids and maps equal the same loop run in this process on plain arrays."""
    import pickle

    import onnxruntime as ort

    from attnviz.runtime.isolation import SlotFeed
    from attnviz.runtime.steps import Loop, advance
    from attnviz.runtime.worker import Server

    path = _cache_step_model(tmp_path / "step.onnx")
    rng = np.random.default_rng(4)
    memory = rng.standard_normal((1, 1, 300, 64)).astype(np.float32)
    past = rng.standard_normal((1, 1, 2, 64)).astype(np.float32)
    assert memory.nbytes > INLINE_BYTES
    plan = cache_step_plan()
    steps = 6
    local = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = advance(Loop(plan, {"past": past, "memory": memory.copy()}, 2), 7, steps, None, local.run, 60.0)
    assert len(set(want.ids)) > 1  # the tokens move: a cache read wrongly would show

    srv = Server(None, str(tmp_path))
    sent: list[bytes] = []
    srv.send = sent.append
    srv.handle("create", (1, path.read_bytes(), {"provider": "cpu"}))
    slot = srv.pool.take(memory.nbytes)  # an output of an earlier run, lent to the parent
    assert slot is not None
    slot.array(memory.dtype, memory.shape)[...] = memory
    feeds = {"input_ids": np.array([[7]]), "past": past, "memory": SlotFeed(slot.id, "<f4", memory.shape)}
    start = (plan, feeds, 2, None)
    ids: list[int] = []
    rows = []
    release: list[int] = []
    while len(ids) < steps:  # a budget of 0 s: one step a chunk
        srv.handle("steps", (1, start, ids[-1] if ids else 7, steps - len(ids), None, 0.0, release))
        status, (got, _, names, items, _, _, _) = pickle.loads(sent[-1])
        assert status == "ok", got
        ids += got
        assert (names == ["probs"]) == (len(ids) == steps)  # the generation's rows go out with its last chunk
        if names:
            item = items[0]
            rows.append(
                srv.pool.slots[item[1]].array(np.dtype(item[2]), item[3]).copy() if item[0] == "slot" else item[1]
            )
        start = None
        if release != [slot.id]:  # the parent drops the presents: the slot goes back, and a run writes over it
            release = [slot.id]
            slot.array(memory.dtype, memory.shape)[...] = -1.0
    assert ids == want.ids
    np.testing.assert_array_equal(rows[0], want.maps["probs"])


def test_only_an_output_array_itself_goes_back_to_the_child_as_its_slot(tmp_path):
    """The parent sends a feed as its slot (SlotFeed) only when it is exactly an array the child's reply was
    lent as; a copy or a slice of it goes through the feed area.  A dropped output's entry goes with its slot."""
    from attnviz.runtime.isolation import SlotFeed

    sess, _ = host.make_session(str(_double_model(tmp_path / "double.onnx")), "cpu")
    x = np.random.default_rng(6).standard_normal((64, 300)).astype(np.float32)
    (y,) = sess.run(None, {"x": x})
    h = host._host
    sent = h._own_slots({"y": y, "copy": y.copy(), "slice": y[:10], "x": x})
    assert isinstance(sent["y"], SlotFeed) and sent["y"].shape == y.shape and sent["y"].dtype == y.dtype.str
    assert h.maps[sent["y"].slot] is not None  # a slot this process has mapped: the child's own
    assert sent["x"] is x and not any(isinstance(sent[k], SlotFeed) for k in ("copy", "slice"))
    del y, sent
    gc.collect()
    (y2,) = sess.run(None, {"x": x})  # this request hands y's slot back: its entry goes
    live = [ref() for ref, _ in h.lent_arrays.values()]
    assert len(live) == 1 and live[0] is y2
