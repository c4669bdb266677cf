"""A model whose tensors lie in a .data file beside it keeps nothing keyed by its .onnx file's hash (its probe, its
statistics graph: AttentionModel.file_key; its summary: test_model_summary.py), even where every one of them is
small enough for the loader to read into the graph (runtime/loading.py INLINE_LIMIT), after which the graph no longer
says where they lay.  A new .data file beside the same .onnx file (new weights, another head count) gives that
data's maps, probe and statistics: checked against a plain onnxruntime session of the new files, the tensors onnx
reads from them, and a worker that keeps nothing.  (The optimised graph's key hashes the graph's bytes, which hold
those small tensors: it was right before, and is pinned here.)"""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper
from onnx_builders import tiny_text_model

from attnviz.corpus import engines
from attnviz.corpus import items as it
from attnviz.corpus.items import read_texts
from attnviz.corpus.plan import encode_items, plan_text
from attnviz.corpus.reduce import BatchReducer, layout
from attnviz.runtime import open_model
from attnviz.runtime import statgraph_kept as sgk
from attnviz.runtime.loading import INLINE_LIMIT

FEEDS = {"input_ids": np.array([[1, 3, 4, 5, 2], [1, 9, 10, 11, 2]], np.int64)}
KEPT = ("optimized", "memory", "probe", "statgraph")
BY_FILE = {"probe", "statgraph"}  # keyed by the .onnx file's hash (AttentionModel.file_key): not kept for these


@pytest.fixture(autouse=True)
def _no_probed_model(monkeypatch):
    monkeypatch.setattr(engines, "_PROBED", None)  # what engines._probe leaves for this process's reducer


def _pair(folder, **built):
    """``tiny_text_model(**built)`` saved as m.onnx with every tensor in m.data beside it; the folder."""
    folder.mkdir()
    m = onnx.load(str(tiny_text_model(folder / "built.onnx", **built)))
    (folder / "built.onnx").unlink()
    onnx.save(m, str(folder / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=0)
    return folder


def _model_with_new_data(tmp_path, **new):
    """m.onnx + m.data (seed 0, 4 heads), and a second pair whose .onnx file is byte-equal and whose .data differs
    (``new``); returns (the model, the new data's bytes)."""
    old = _pair(tmp_path / "old", heads=4, d=16, **{"causal": new.get("causal", False)})
    other = _pair(tmp_path / "new", d=16, **new)
    assert (old / "m.onnx").read_bytes() == (other / "m.onnx").read_bytes()  # only the weights differ
    assert (old / "m.data").read_bytes() != (other / "m.data").read_bytes()
    every = onnx.load(str(old / "m.onnx"), load_external_data=False).graph.initializer
    assert all(t.data_location == onnx.TensorProto.EXTERNAL for t in every)
    assert max(int(np.prod(t.dims)) for t in every) <= INLINE_LIMIT  # all read into the graph by the loader
    path = old / "m.onnx"
    it.sha256_model(path)  # as a corpus driver hashes the model before its workers open it
    return path, (other / "m.data").read_bytes()


def _reference_maps(path):
    """Each softmax's map from a plain onnxruntime session of the files as they are now (onnx reads the .data)."""
    m = onnx.load(str(path))
    names = [n.output[0] for n in m.graph.node if n.op_type == "Softmax" and n.name.endswith("attn/Softmax")]
    m.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(names, FEEDS)


def _maps(path):
    """One command's maps: its session's optimised graph kept (as a corpus worker's probe keeps it)."""
    model = open_model(str(path), provider="cpu", threads=1)
    model.keep_optimized = True
    return [s.array() for s in model.run(FEEDS, mode="dense").maps]


def _kept(cache):
    return {k: sorted((cache / k).iterdir()) for k in KEPT if (cache / k).is_dir() and any((cache / k).iterdir())}


def test_new_weights_in_the_data_file_give_their_own_maps(tmp_path, cache):
    path, new_data = _model_with_new_data(tmp_path, heads=4, seed=1)
    old = _maps(path)
    for got, want in zip(old, _reference_maps(path)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

    (path.parent / "m.data").write_bytes(new_data)  # the .onnx file untouched: its kept hash still holds
    want = _reference_maps(path)
    assert not all(np.allclose(a, b) for a, b in zip(old, want))
    for got, ref in zip(_maps(path), want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    # the optimised graph's key hashes the graph's bytes, which hold the small tensors: the new data's is another
    kept = _kept(cache)
    assert set(kept) == {"optimized", "memory"} and len(kept["optimized"]) == 2


def test_a_new_head_count_in_the_data_file_is_probed_again(tmp_path, cache):
    """The head count lies in a Reshape's shape tensor, itself in the .data file: a probe kept for the old data
    would say 4 heads of a model that now has 2."""
    path, new_data = _model_with_new_data(tmp_path, heads=2, causal=True)
    setup = engines.WorkerSetup(str(path), "cpu", None, 1, 5, (), 1)
    state, _ = engines._probe(setup)
    assert state[2] == [("decoder", 4)] * 2

    (path.parent / "m.data").write_bytes(new_data)
    engines._PROBED = None
    state, _ = engines._probe(setup)
    heads = {m.shape[1] for m in _reference_maps(path)}
    assert heads == {2} and state[2] == [("decoder", 2)] * 2
    assert not BY_FILE & set(_kept(cache))


def _partials(path, texts):
    reducer = BatchReducer(str(path), "cpu", None, 1, 3)
    items = read_texts(texts)
    specs = plan_text(items, encode_items(reducer.model, items), None, None, 8, equal_lengths=False)
    return [reducer(s) for s in specs]


def test_new_weights_in_the_data_file_give_their_own_statistics(tmp_path, cache, monkeypatch):
    path, new_data = _model_with_new_data(tmp_path, heads=4, seed=1)
    texts = tmp_path / "c.txt"
    words = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "home"]
    texts.write_text("".join(" ".join(words[i % 5 : i % 5 + 2 + i % 4]) + "\n" for i in range(12)))
    old = _partials(path, texts)

    (path.parent / "m.data").write_bytes(new_data)
    got = _partials(path, texts)
    with monkeypatch.context() as m:
        m.setenv("ATTNVIZ_CACHE_DIR", "off")  # a worker that keeps nothing builds its own
        fresh = _partials(path, texts)
    assert not all(np.array_equal(a.sums, b.sums) for a, b in zip(old, fresh))
    for a, b in zip(got, fresh):
        for f in ("sums", "counts", "top_value", "top_item", "top_row", "top_col"):
            assert np.array_equal(getattr(a, f), getattr(b, f)), f

    model = open_model(str(path), provider="cpu")
    assert model.probe()
    graph, _, _ = sgk.stats_model(model, {g.site for g in layout(model.sites)})
    weights = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    shared = [t for t in graph.graph.initializer if t.name in weights]
    assert {t.name for t in shared} >= {"emb", "Wq0", "Wk1"}
    for t in shared:  # the statistics graph holds the new data's tensors
        np.testing.assert_array_equal(numpy_helper.to_array(t), weights[t.name])
    assert not BY_FILE & set(_kept(cache))
