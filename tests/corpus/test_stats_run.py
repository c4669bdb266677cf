"""A corpus batch's statistics run (InGraphReducer.run -> ExtraSession.run_small): in a worker's own process on the
CPU, onnxruntime's plain run (less host time than a binding for outputs this small), the memory check still made;
in the crash-isolation child, the binding as before.  The partials are those of the binding, byte for byte."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from planted import corpus_lines, planted_model

from attnviz import AttnvizError
from attnviz.corpus.graph_reduce import InGraphReducer
from attnviz.corpus.items import read_texts
from attnviz.corpus.plan import encode_items, plan_text
from attnviz.corpus.reduce import BatchReducer
from attnviz.runtime import host
from attnviz.runtime import statfeeds as sf
from attnviz.runtime.extra_session import ExtraSession
from attnviz.runtime.guard import GuardedSession

FIELDS = ("sums", "counts", "top_value", "top_item", "top_row", "top_col")


class _Seen:
    """An onnxruntime session that notes which of its entries a run took."""

    def __init__(self, sess, seen: list):
        self._s, self.seen = sess, seen

    def run(self, *a, **k):
        self.seen.append("run")
        return self._s.run(*a, **k)

    def run_with_iobinding(self, *a, **k):
        self.seen.append("binding")
        return self._s.run_with_iobinding(*a, **k)

    def __getattr__(self, name):
        return getattr(self._s, name)


@pytest.fixture
def planted(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")  # as in a pool process (engines._enter_worker)
    model = planted_model(tmp_path / "planted.onnx")
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(corpus_lines(50)) + "\n")
    red = BatchReducer(str(model), "cpu", None, 1, 3)
    items = read_texts(texts)
    specs = plan_text(items, encode_items(red.model, items), None, None, 8, equal_lengths=False)
    assert len(specs) > 3
    return model, specs


def _guarded(red: BatchReducer) -> GuardedSession:
    red.prepare()
    assert isinstance(red.in_graph, InGraphReducer)
    guarded = red.in_graph.sess._sess
    assert isinstance(guarded, GuardedSession) and guarded.outputs is None  # (a CPU session: nothing pinned)
    return guarded


def test_in_process_cpu_statistics_take_the_plain_run_and_give_the_bound_runs_partials(planted, monkeypatch):
    model, specs = planted
    seen: list = []
    plain = BatchReducer(str(model), "cpu", None, 1, 3)
    g = _guarded(plain)
    g._sess = _Seen(g._sess, seen)
    got = plain.many(specs, 2)
    assert seen == ["run"] * len(specs)

    monkeypatch.setattr(GuardedSession, "run_small", GuardedSession.run_bound)  # the binding, as before
    bound = BatchReducer(str(model), "cpu", None, 1, 3)
    g = _guarded(bound)
    g._sess = _Seen(g._sess, seen)
    seen.clear()
    want = bound.many(specs, 2)
    assert seen == ["binding"] * len(specs)
    for a, b in zip(got, want):
        assert (a.batch_id, a.items, a.tokens) == (b.batch_id, b.items, b.tokens)
        for f in FIELDS:
            x, y = getattr(a, f), getattr(b, f)
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), f


def test_the_plain_run_is_memory_checked(planted, monkeypatch):
    model, specs = planted
    red = BatchReducer(str(model), "cpu", None, 1, 3)
    _guarded(red)
    ig = red.in_graph
    feeds, lengths, special = red.feeds(specs[-1])
    extra, _ = sf.stat_feeds(np.asarray(lengths), special, special.shape[1])
    ig.sess.run_small(ig.fetch, {**feeds, **extra})  # under the machine's cap: runs
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", "0.000001")  # 1 kB
    with pytest.raises(AttnvizError, match="--max-memory"):
        ig.sess.run_small(ig.fetch, {**feeds, **extra})


def _double(path) -> str:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "double", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path.write_bytes(m.SerializeToString())
    return str(path)


def test_the_isolated_childs_session_runs_small_outputs_bound_as_before(tmp_path, monkeypatch):
    """RemoteSession has no run_small: ExtraSession takes its run_bound (the child's replies, slots or pickles)."""
    monkeypatch.delenv("ATTNVIZ_INPROCESS", raising=False)
    sess = host.make_session(_double(tmp_path / "double.onnx"), "cpu")[0]
    assert not isinstance(sess, (GuardedSession, ort.InferenceSession)) and not hasattr(sess, "run_small")
    calls = []
    real = type(sess).run_bound

    def spy(self, names, feeds):
        calls.append(list(names))
        return real(self, names, feeds)

    monkeypatch.setattr(type(sess), "run_bound", spy)
    x = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(ExtraSession(sess).run_small(["y"], {"x": x})[0], 2 * x)
    assert calls == [["y"]]
    host.shutdown()
