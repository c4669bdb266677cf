"""Crash isolation at less cost (issue 8 targets with issue 9's child process): the parent never parses the
weights, and maps over 64 kB come back through shared-memory slots the parent maps instead of the pipe.
Timing and memory figures live in bench/engine_memory_bench.py; these tests hold the behaviour."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import tiny_text_model

from attnviz.runtime import host, open_model
from attnviz.runtime.graph import Graph
from attnviz.runtime.loading import load_model


def weights_inside_model(path: Path, n: int = 128) -> tuple[Path, np.ndarray]:
    w = np.random.default_rng(3).standard_normal((n, n)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
        [numpy_helper.from_array(w, "w")],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path, w


def test_weights_stay_in_the_file_and_read_back_exactly(tmp_path):
    path, w = weights_inside_model(tmp_path / "m.onnx")
    model, folder = load_model(path)
    t = model.graph.initializer[0]
    assert t.data_location == TensorProto.EXTERNAL and not t.raw_data  # no weight bytes in the parsed proto
    refs = {e.key: e.value for e in t.external_data}
    assert refs["location"] == "m.onnx" and folder == str(tmp_path.resolve())
    # the reference points at the weight's own bytes in the file
    assert path.read_bytes()[int(refs["offset"]) : int(refs["offset"]) + int(refs["length"])] == w.tobytes()
    np.testing.assert_array_equal(Graph(model, folder).const_value("w"), w)


def test_a_symlinked_model_runs_with_weights_read_by_reference(tmp_path):
    (tmp_path / "real").mkdir()
    path, w = weights_inside_model(tmp_path / "real" / "m.onnx")
    link_dir = tmp_path / "elsewhere"
    link_dir.mkdir()
    (link_dir / "alias.onnx").symlink_to(path)
    model, folder = load_model(link_dir / "alias.onnx")
    assert {e.key: e.value for e in model.graph.initializer[0].external_data}["location"] == "m.onnx"
    x = np.random.default_rng(4).standard_normal((1, 128)).astype(np.float32)
    sess, _ = host.make_session(model.SerializeToString(), "cpu", external_dir=folder)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], x @ w, rtol=1e-5, atol=1e-5)


def test_repeated_runs_through_shared_memory_match_in_process(tmp_path, monkeypatch):
    """Maps of a few hundred kB (once pickled through the pipe) now come back as mapped files, bit-identical."""
    tiny = tiny_text_model(tmp_path / "tiny.onnx", d=16, heads=2)
    long_ids = np.array([[1] + [3, 4, 5, 6, 7] * 40 + [2]], np.int64)  # 202 tokens: 320 kB per map
    short_ids = long_ids[:, :150]
    remote = open_model(tiny, provider="cpu")
    runs = [remote.run({"input_ids": ids}, mode="dense") for ids in (long_ids, long_ids, short_ids, long_ids)]
    monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    local = open_model(tiny, provider="cpu")
    want = {len(ids[0]): local.run({"input_ids": ids}, mode="dense") for ids in (long_ids, short_ids)}
    assert runs[0].maps[0].array().nbytes > host.INLINE_BYTES
    for r in runs:
        ref = want[r.maps[0].array().shape[-1]]
        for a, b in zip(r.maps, ref.maps):
            np.testing.assert_array_equal(a.array(), b.array())
        np.testing.assert_array_equal(r.outputs["logits"], ref.outputs["logits"])
    # every slot is still lent (all four results are held): one file per map, none reused under a held result
    assert host._host is not None
    slots = [f for f in os.listdir(host._host.outdir) if f.startswith("slot-")]  # (feeds-N: the parent's feed area)
    assert len(slots) == sum(len(r.maps) for r in runs)


def test_thread_spinning_is_off_unless_asked_for(monkeypatch):
    """Spin-waiting onnxruntime threads steal the GUI's cores: off by default; ATTNVIZ_SPIN=1 (what the time
    bench's --spin uses to compare against a spinning plain baseline) turns it back on."""
    from attnviz.runtime.session import session_options

    monkeypatch.delenv("ATTNVIZ_SPIN", raising=False)
    assert session_options().get_session_config_entry("session.intra_op.allow_spinning") == "0"
    monkeypatch.setenv("ATTNVIZ_SPIN", "1")
    so = session_options()
    assert so.get_session_config_entry("session.intra_op.allow_spinning") == "1"
    assert so.get_session_config_entry("session.inter_op.allow_spinning") == "1"
