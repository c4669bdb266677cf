"""What an attnviz run costs beyond plain onnxruntime (issue 8, maps at <= 1.05x plain time): the instrumented
graph must optimise to the same kernels as the original (an extra output in the middle of a fusion pattern would
make every run slower), and the per-stage trace bench/engine_breakdown_bench.py reads must be in order.
Timings themselves live in bench/ (engine_memory_bench.py, engine_breakdown_bench.py)."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx_builders import tiny_text_model

from attnviz.runtime import graph as gr
from attnviz.runtime import host, open_model


def optimized_ops(model: str | bytes, folder: Path, out: Path) -> collections.Counter:
    """Node types of the graph onnxruntime actually runs (its level-2 fusions applied), by domain."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED  # the fusions; no CPU layout
    so.optimized_model_filepath = str(out)
    so.add_session_config_entry("session.optimized_model_external_initializers_file_name", out.name + ".data")
    so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    so.add_session_config_entry("session.model_external_initializers_file_folder_path", str(folder))
    so.log_severity_level = 3
    ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    m = onnx.load(str(out), load_external_data=False)
    return collections.Counter(f"{n.domain or 'ai.onnx'}:{n.op_type}" for n in m.graph.node)


def _instrumented(path: Path) -> tuple[bytes, object]:
    model = open_model(path, provider="cpu")
    data, _ = gr.instrumented_bytes(model.graph, model._sites, "dense")
    return data, model


@pytest.mark.parametrize("arch,exporter", [("minilm", "legacy"), ("bert", "dynamo"), ("bart", "legacy")])
def test_the_instrumented_graph_keeps_every_fusion_plain_onnxruntime_gets(hf_export, tmp_path, arch, exporter):
    path, *_ = hf_export(arch, exporter, "eager", 17)
    path = Path(path)
    data, model = _instrumented(path)
    plain = optimized_ops(str(path), path.parent, tmp_path / "plain.onnx")
    ours = optimized_ops(data, Path(model.external_dir or path.parent), tmp_path / "ours.onnx")
    fused = {k: v for k, v in plain.items() if k.startswith("com.microsoft:")}
    assert fused  # onnxruntime fused something here (BiasGelu, FusedMatMul, SkipLayerNormalization...)
    assert ours == plain


def test_an_output_inside_a_fusion_pattern_is_seen_by_the_check(hf_export, tmp_path):
    """The comparison above can fail: exposing the tensor inside the Gelu pattern (what the Erf reads) leaves
    the pattern unfused, and the node types differ."""
    path, *_ = hf_export("minilm", "legacy", "eager", 17)
    path = Path(path)
    data, model = _instrumented(path)
    m = onnx.ModelProto.FromString(data)
    erf = next(n for n in m.graph.node if n.op_type == "Erf")
    m.graph.output.append(onnx.helper.make_empty_tensor_value_info(erf.input[0]))
    folder = Path(model.external_dir or path.parent)
    plain = optimized_ops(str(path), path.parent, tmp_path / "plain.onnx")
    blocked = optimized_ops(m.SerializeToString(), folder, tmp_path / "blocked.onnx")
    assert blocked["com.microsoft:BiasGelu"] < plain["com.microsoft:BiasGelu"]
    assert blocked != plain


def test_the_run_trace_has_one_ordered_pair_per_run(tmp_path, monkeypatch):
    """ATTNVIZ_TRACE=1: both processes stamp each run on one clock; bench/engine_breakdown_bench.py splits the
    wall time with them, so every stamp must fall inside the run and in the order the run happens."""
    tiny = tiny_text_model(tmp_path / "tiny.onnx", d=16, heads=2)
    ids = np.array([[1] + [3, 4, 5, 6, 7] * 20 + [2]], np.int64)
    host.shutdown()
    monkeypatch.setenv("ATTNVIZ_TRACE", "1")
    try:
        model = open_model(tiny, provider="cpu")
        model.run({"input_ids": ids}, mode="dense")  # the session is created on the first run
        host.take_trace()
        import time

        spans = []
        for _ in range(3):
            t0 = time.perf_counter()
            model.run({"input_ids": ids}, mode="dense")
            spans.append((t0, time.perf_counter()))
        parent, child = host.take_trace()
        assert len(parent) == len(child) == 3
        for (a0, a1), (p0, p1, p2, p3), (c0, o0, o1, c1) in zip(spans, parent, child):
            assert a0 <= p0 <= p1 <= p2 <= p3 <= a1
            assert p0 <= c0 <= o0 < o1 <= c1 <= p2  # onnxruntime ran inside the child's handling, which the
            # parent's wait spans
        assert host.take_trace() == ([], [])  # taken: the next call starts afresh
    finally:
        host.shutdown()  # the next test's child starts without tracing
    monkeypatch.delenv("ATTNVIZ_TRACE")
    open_model(tiny, provider="cpu").run({"input_ids": ids}, mode="dense")
    assert host.take_trace() == ([], [])  # off by default: nothing recorded


def _thp_mode() -> str:
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return "none"
    return text.split("[", 1)[1].split("]", 1)[0]


def _anon_huge_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0


def _glibc_has_hugetlb_tunable() -> bool:
    import platform

    name, version = platform.libc_ver()
    return name == "glibc" and tuple(int(p) for p in version.split(".")[:2]) >= (2, 35)


@pytest.mark.skipif(
    _thp_mode() != "madvise" or not _glibc_has_hugetlb_tunable(),
    reason="needs Linux with transparent huge pages in madvise mode and glibc >= 2.35",
)
def test_the_child_keeps_its_weights_in_huge_pages(tmp_path, monkeypatch):
    """With THP in madvise mode only memory that asks gets 2 MB pages: with ATTNVIZ_HUGEPAGES=1 the child's malloc
    asks, so onnxruntime's packed weights (a 4 MB MatMul weight here) land in huge pages; by default (and with 0)
    they stay in 4 kB pages."""
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(3).standard_normal((1024, 1024)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1024])],
        [numpy_helper.from_array(w, "w")],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    x = np.random.default_rng(5).standard_normal((1, 1024)).astype(np.float32)
    huge = {}
    for setting in ("1", "0", None):
        host.shutdown()
        if setting is None:
            monkeypatch.delenv("ATTNVIZ_HUGEPAGES", raising=False)
        else:
            monkeypatch.setenv("ATTNVIZ_HUGEPAGES", setting)
        sess, _ = host.make_session(str(path), "cpu")
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], x @ w, rtol=1e-4, atol=1e-4)
        assert host._host is not None
        huge[setting] = _anon_huge_kb(host._host.proc.pid)
        del sess
    host.shutdown()
    assert huge["1"] >= 2048 and huge["0"] == 0 and huge[None] == 0


def test_a_users_own_malloc_tunables_are_kept():
    on = {"ATTNVIZ_HUGEPAGES": "1"}
    assert host._huge_pages_env({}) == {} and host._huge_pages_env({"ATTNVIZ_HUGEPAGES": "0"}) == {}  # off by default
    assert host._huge_pages_env(on) == {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    assert host._huge_pages_env({**on, "GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}) == {
        "GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    }
    assert host._huge_pages_env({**on, "GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}) == {}  # the user's choice wins
