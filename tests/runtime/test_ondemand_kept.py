"""On-demand maps whose Q and Kᵀ stay where onnxruntime wrote them (runtime/kept.py): on CUDA by default, on the
CPU with ATTNVIZ_QK_DEVICE=on, which runs the same code here without a GPU.  Each head is computed by the site's
head model beside the kept values; the maps must be the host recompute's (RecomputeMap), and both must be the
model's own attention (transformers' eager maps, and the dense run's)."""

import gc

import numpy as np
import pytest
from onnx_builders import tiny_text_model

from attnviz import AttnvizError
from attnviz.runtime import host
from attnviz.runtime import model as rm
from attnviz.runtime.sitemaps import KeptMap, RecomputeMap

# gc.collect() here frees what each test made; not a traversal of the whole suite's heap (conftest.py)
pytestmark = pytest.mark.usefixtures("young_gc")

# the head model's Q·Kᵀ is onnxruntime's MatMul, the host recompute's numpy's: on this CPU they agreed bit for bit
# (max |difference| 0 over these models and MiniLM at 512 tokens, measured); another summation order (a GPU's
# kernels) would move probabilities in the last float32 bits, which this allows
SAME = 1e-6
TOL = 5e-4  # against transformers' own maps (test_parity's tolerance)


def _runs(path, feeds, monkeypatch):
    monkeypatch.delenv("ATTNVIZ_QK_DEVICE", raising=False)
    host_maps = rm.open_model(path, provider="cpu").run(feeds, mode="ondemand")
    dense = rm.open_model(path, provider="cpu").run(feeds, mode="dense")
    monkeypatch.setenv("ATTNVIZ_QK_DEVICE", "on")
    kept = rm.open_model(path, provider="cpu").run(feeds, mode="ondemand")
    return host_maps, kept, dense


@pytest.mark.parametrize(
    "arch",
    [
        "bert",  # a padded batch: the attention mask is the epilogue's side input, per batch row
        "bart",  # encoder self-attention, the decoder's causal self-attention, cross-attention
        "gpt2",  # causal, the mask built in the graph
        "llama",  # grouped KV heads (repeated before the QK MatMul), rotary positions
    ],
)
def test_kept_heads_equal_the_host_recompute_and_the_models_maps(hf_export, arch, placement, monkeypatch):
    path, feeds, ref, _ = hf_export(arch, "legacy", "eager", 17)
    host_maps, kept, dense = _runs(path, feeds, monkeypatch)
    assert kept.info["mode"] == "ondemand"
    kinds = [type(m) for m in kept.maps]
    assert KeptMap in kinds and kinds == [KeptMap if t is RecomputeMap else t for t in map(type, host_maps.maps)]
    for i, (k, h, d, want) in enumerate(zip(kept.maps, host_maps.maps, dense.maps, ref)):
        assert k.shape == h.shape == d.shape == want.shape
        for b in range(k.shape[0]):
            for hd in range(k.shape[1]):
                got = k.head(b, hd)
                assert got.dtype == np.float32 and got.shape == k.shape[2:]
                np.testing.assert_allclose(got, h.head(b, hd), atol=SAME, rtol=0, err_msg=f"site {i} ({b}, {hd})")
                np.testing.assert_allclose(got, want[b, hd].astype(np.float64), atol=TOL, err_msg=f"site {i}")
                np.testing.assert_allclose(h.head(b, hd), want[b, hd], atol=TOL)
        np.testing.assert_allclose(k.array(), d.array().astype(np.float64), atol=TOL)


def test_the_mask_stays_beside_q_and_k_and_each_request_slices_its_own(hf_export, monkeypatch):
    """A padded batch's attention mask (an epilogue side input: ``[B, 1, T, T]`` float32, 67 MB at 4,096 tokens,
    whose copy to the host was ~6 ms of a 16 ms H100 run) stays where the run wrote it, as Q and Kᵀ do; the head
    model picks each request's batch row, heads and row block from it.  Against transformers' own maps: a padded
    row's keys past its length must get nothing, which only the right row of the mask gives."""
    path, feeds, ref, _ = hf_export("bert", "legacy", "eager", 17)
    lengths = feeds["attention_mask"].sum(1)
    assert lengths.min() < lengths.max()  # the fixture pads its second row
    monkeypatch.setenv("ATTNVIZ_QK_DEVICE", "on")
    monkeypatch.setattr(KeptMap, "CHUNK_ELEMS", 2 * feeds["input_ids"].shape[1])  # blocks of 2 rows a request
    r = rm.open_model(path, provider="cpu").run(feeds, mode="ondemand")
    for i, m in enumerate(r.maps):
        assert type(m) is KeptMap and not m.side, "no side input came to the host"
        assert [type(v).__name__ for v in m.side_kept.values()] == ["KeptRef"]  # held by the child, by id
        for b in range(m.shape[0]):
            for h in range(m.shape[1]):
                got = m.head(b, h)
                np.testing.assert_allclose(got, ref[i][b, h], atol=TOL, err_msg=f"site {i} ({b}, {h})")
                assert not got[:, lengths[b] :].any()
        np.testing.assert_allclose(m.array(), ref[i], atol=TOL)  # every head of a row in one request


def _tiny(tmp_path, causal=True):
    return tiny_text_model(tmp_path / "lm.onnx", causal=causal, classifier=False, heads=4, d=16)


def _hand(q: np.ndarray, k: np.ndarray, causal: bool) -> np.ndarray:
    """The tiny model's attention in float64 from its Q and Kᵀ: softmax(Q·Kᵀ / √d, masked above the diagonal)."""
    s = np.einsum("bhtd,bhds->bhts", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(q.shape[-1])
    if causal:
        s = s + np.triu(np.full(s.shape[-2:], -1e4), 1)
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_kept_rows_in_chunks_runs_again_and_heads_in_any_order(tmp_path, placement, monkeypatch):
    """Several row blocks a head (the causal mask sliced per block), several runs, each result still drawing
    after a newer run; one head session per site, reused; each against a float64 computation."""
    path = _tiny(tmp_path)
    ids = [np.array([[1, 3, 4, 5, 6, 7, 8, 9, 10, 2]]), np.array([[1, 9, 8, 7, 2]])]
    monkeypatch.delenv("ATTNVIZ_QK_DEVICE", raising=False)
    m_host = rm.open_model(path, provider="cpu")
    hosts = [m_host.run({"input_ids": x}, mode="ondemand") for x in ids]
    monkeypatch.setenv("ATTNVIZ_QK_DEVICE", "on")
    monkeypatch.setattr(KeptMap, "CHUNK_ELEMS", 25)  # rows of 10 keys: blocks of 2 rows
    m = rm.open_model(path, provider="cpu")
    results = [m.run({"input_ids": x}, mode="ondemand") for x in ids]
    sessions = dict(m._heads)
    assert len(sessions) == 2 and all(s is not None for s in sessions.values())
    for order in ([(0, 1), (1, 3), (0, 0)], [(1, 2), (0, 3), (1, 1)]):  # sites, heads, runs interleaved
        for res, hres in zip(results[::-1], hosts[::-1]):
            for site, h in order:
                got = res.maps[site].head(0, h)
                want = hres.maps[site]
                np.testing.assert_allclose(got, want.head(0, h), atol=SAME, rtol=0)
                hand = _hand(want.q, want.k, causal=True)[0, h]
                np.testing.assert_allclose(got, hand, atol=1e-6, rtol=0)
    again = m.run({"input_ids": ids[0]}, mode="ondemand")  # a third run: the same sessions serve it
    assert m._heads == sessions
    np.testing.assert_allclose(again.maps[1].array(), hosts[0].maps[1].array(), atol=SAME, rtol=0)


def test_kept_values_are_dropped_in_the_child_once_the_result_is(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_QK_DEVICE", "on")
    m = rm.open_model(_tiny(tmp_path, causal=False), provider="cpu")
    ids = {"input_ids": np.array([[1, 3, 4, 5, 6, 2]])}
    first = m.run(ids, mode="ondemand")
    second = m.run(ids, mode="ondemand")
    child = host._host
    assert child is not None
    assert child.kept_count() == 8  # two runs × two sites × (Q, Kᵀ)
    want = first.maps[0].head(0, 2)
    del second
    gc.collect()
    assert child.kept_count() == 4  # the request after the drop told the child
    np.testing.assert_array_equal(first.maps[0].head(0, 2), want)
    del first
    gc.collect()
    assert child.kept_count() == 0


def test_a_result_from_a_restarted_child_says_so_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_QK_DEVICE", "on")
    m = rm.open_model(_tiny(tmp_path), provider="cpu")
    r = m.run({"input_ids": np.array([[1, 3, 4, 2]])}, mode="ondemand")
    host.shutdown()
    with pytest.raises(AttnvizError, match="restarted; run the model again"):
        r.maps[0].head(0, 0)
    r2 = m.run({"input_ids": np.array([[1, 3, 4, 2]])}, mode="ondemand")  # a new run draws again
    assert r2.maps[0].head(0, 0).shape == (4, 4)


def test_the_switch_is_off_on_the_cpu_by_default_and_checked(tmp_path, placement, monkeypatch):
    path = _tiny(tmp_path)
    monkeypatch.delenv("ATTNVIZ_QK_DEVICE", raising=False)
    r = rm.open_model(path, provider="cpu").run({"input_ids": np.array([[1, 3, 4, 2]])}, mode="ondemand")
    assert all(type(x) is RecomputeMap for x in r.maps)
    monkeypatch.setenv("ATTNVIZ_QK_DEVICE", "off")
    r = rm.open_model(path, provider="cpu").run({"input_ids": np.array([[1, 3, 4, 2]])}, mode="ondemand")
    assert all(type(x) is RecomputeMap for x in r.maps)
    monkeypatch.setenv("ATTNVIZ_QK_DEVICE", "gpu")
    with pytest.raises(AttnvizError, match=r"ATTNVIZ_QK_DEVICE='gpu' is not a Q/K placement; use one of auto, on, off"):
        rm.open_model(path, provider="cpu").run({"input_ids": np.array([[1, 3, 4, 2]])}, mode="ondemand")


def test_long_heads_come_back_through_the_childs_slots(tmp_path, monkeypatch):
    """A head's rows past the inline size (here 200 × 200 float32 = 160 kB) are written by onnxruntime straight
    into a slot of the child's (page-locked on CUDA), whole or in row blocks; the same numbers as the host's."""
    path = _tiny(tmp_path)
    ids = {"input_ids": np.random.default_rng(0).integers(3, 12, (1, 200))}
    monkeypatch.delenv("ATTNVIZ_QK_DEVICE", raising=False)
    want = rm.open_model(path, provider="cpu").run(ids, mode="ondemand")
    monkeypatch.setenv("ATTNVIZ_QK_DEVICE", "on")
    got = rm.open_model(path, provider="cpu").run(ids, mode="ondemand")
    whole = got.maps[1].head(0, 3)
    owner = whole
    while isinstance(owner, np.ndarray):
        owner = owner.base
    # a view of the slot the child wrote (child.ChildProcess.lend: the shared mapping's ctypes buffer), not a copy
    assert whole.nbytes > host.INLINE_BYTES and type(owner).__name__ == f"c_char_Array_{whole.nbytes}"
    np.testing.assert_allclose(whole, want.maps[1].head(0, 3), atol=SAME, rtol=0)
    monkeypatch.setattr(KeptMap, "CHUNK_ELEMS", 200 * 90)  # blocks of 90, 90 and 20 rows
    np.testing.assert_allclose(got.maps[0].head(0, 1), want.maps[0].head(0, 1), atol=SAME, rtol=0)
    np.testing.assert_allclose(_hand(want.maps[0].q, want.maps[0].k, True)[0, 1], got.maps[0].head(0, 1), atol=1e-6)
