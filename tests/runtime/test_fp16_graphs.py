"""Issue 22 item 3, fp16 graphs (no torch): a model converted by onnxruntime's float16 converter with keep_io_types
(float32 at its edges, float16 inside, as the Hub's ``_fp16`` files) gives its maps as float32 numbers equal to the
graph's own float16 probabilities, close to the float32 model's; with Softmax on the op block list (float32 between
Casts) too, in dense and on-demand memory modes.  A float16 graph whose scores overflow is refused in one line
that names float16 and the way out."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from onnx_builders import tiny_text_model

from attnviz.cli import main
from attnviz.runtime import open_model

float16 = pytest.importorskip("onnxruntime.transformers.float16")

IDS = np.array([[1, 4, 5, 6, 2], [1, 7, 8, 3, 2]], np.int64)


def _fp16(src, dst, softmax32: bool = False):
    m = onnx.load(str(src))
    h = float16.convert_float_to_float16(m, keep_io_types=True, op_block_list=["Softmax"] if softmax32 else None)
    onnx.save(h, str(dst))
    return dst


def _own_probs(path) -> list[np.ndarray]:
    """The graph's probabilities by hand: each Softmax's output followed through Casts to the P·V MatMul."""
    m = onnx.load(str(path))
    consumers: dict[str, list] = {}
    for n in m.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    names = []
    for n in m.graph.node:
        if n.op_type == "Softmax":
            t = n.output[0]
            while [c.op_type for c in consumers.get(t, [])] == ["Cast"]:
                t = consumers[t][0].output[0]
            if [c.op_type for c in consumers.get(t, [])] == ["MatMul"]:  # not the classifier head's
                names.append(t)
    m.graph.output.extend(helper.make_empty_tensor_value_info(t) for t in names)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(names, {"input_ids": IDS})


@pytest.mark.parametrize("softmax32", [False, True], ids=["softmax-fp16", "softmax-fp32-between-casts"])
@pytest.mark.parametrize("mode", ["dense", "ondemand", "ondemand-kept"])
def test_fp16_maps_are_the_graphs_own_as_float32(tmp_path, softmax32, mode, monkeypatch):
    kept = mode == "ondemand-kept"
    if kept:  # Q and Kᵀ left where onnxruntime wrote them, a head by the site's head model (runtime/kept.py)
        monkeypatch.setenv("ATTNVIZ_QK_DEVICE", "on")
        mode = "ondemand"
    full = tiny_text_model(tmp_path / "m.onnx", causal=True)
    half = _fp16(full, tmp_path / "m_fp16.onnx", softmax32)
    want = _own_probs(half)
    assert {w.dtype for w in want} == {np.dtype(np.float16)}
    r = open_model(half, provider="cpu").run({"input_ids": IDS}, mode=mode)
    r32 = open_model(full, provider="cpu").run({"input_ids": IDS}, mode=mode)
    assert [s.method for s in r.sites] == ["softmax", "softmax"] and r.info["map_dtype"] == "float16"
    assert "map_dtype" not in r32.info
    assert all((type(m).__name__ == "KeptMap") == kept for m in (*r.maps, *r32.maps))
    for got, w, ref in zip(r.maps, want, r32.maps):
        a = got.array()
        assert a.dtype == np.float32 and np.isfinite(a).all()
        # dense: the same numbers.  On demand the scores are recomputed through the graph's own epilogue, which
        # rounds them to float16 before the scale; in the whole graph onnxruntime folds the scale into the MatMul
        # (FusedMatMul) and rounds once: a few float16 steps (measured 4.9e-4)
        assert np.abs(a - w.astype(np.float32)).max() <= (0 if mode == "dense" else 1e-3)
        assert 0 < np.abs(a - ref.array()).max() < 2e-3  # float16's rounding of the float32 model's maps


def test_non_finite_fp16_maps_are_one_line_naming_float16(tmp_path, capsys):
    """NaN attention from a float16 graph is refused in one line that says float16 and points at full precision
    (onnxruntime's float16 Softmax turns overflowed scores into one-hot rows, not NaN: a NaN scale makes it)."""
    full = tiny_text_model(tmp_path / "m.onnx", causal=True)
    half = onnx.load(str(_fp16(full, tmp_path / "m_fp16.onnx")))
    t = next(t for t in half.graph.initializer if t.name == "scale")
    t.CopyFrom(numpy_helper.from_array(np.array(np.nan, np.float16), "scale"))
    onnx.save(half, str(tmp_path / "m_fp16.onnx"))
    rc = main(["extract", str(tmp_path / "m_fp16.onnx"), "--text", "the cat", "--out", str(tmp_path / "o.npz")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "float16 graph produced NaN/Inf attention at decoder self L0" in err[0] and "--variant full" in err[0]
    assert not (tmp_path / "o.npz").exists()
