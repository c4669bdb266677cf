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
from attnviz.runtime.worker import ShapeLinks, _slot_size

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
    seen = []
    for _ in range(6):
        r = remote.run({"input_ids": IDS_A}, mode="dense")
        del r
        gc.collect()
        seen.append(sorted(host._host.maps))
    # after the first runs the same slots go round: nothing grows however many runs follow
    assert seen[-1] == seen[-2] == seen[-3]
    assert len(os.listdir(host._host.outdir)) == len(seen[-1]) <= 2 * 2  # 2 maps a run (logits go inline)


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
