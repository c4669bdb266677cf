"""What a model keeps between runs to spare each run's host work (QK nodes' attributes, a kept map's layout per
shapes, each site's SiteInfo, the fetch list per session) never changes a result: a model run again, on other
lengths and batches, gives what a fresh model gives on the same feeds, field by field; and each kept thing
follows what it was made from (a session made anew, another length, sites relabelled)."""

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx_builders import tiny_text_model

from attnviz.core.attention import AttentionResult, SiteInfo
from attnviz.runtime import feedcheck as fc
from attnviz.runtime import kept
from attnviz.runtime import model as rm
from attnviz.runtime.sitemaps import KeptMap, RecomputeMap

pytestmark = pytest.mark.usefixtures("young_gc")

# the head model's Q·Kᵀ is onnxruntime's MatMul, the host recompute's numpy's (test_ondemand_kept.py: equal here)
SAME = 1e-6


def _variants(feeds: dict) -> list[tuple[str, dict]]:
    """The fixture's padded batch of two, again, shorter, one row, three rows, then the first again."""
    ids, mask = feeds["input_ids"], feeds["attention_mask"]
    return [
        ("batch", feeds),
        ("again", {k: v.copy() for k, v in feeds.items()}),
        ("shorter", {"input_ids": ids[:, :5].copy(), "attention_mask": mask[:, :5].copy()}),
        ("one row", {"input_ids": ids[1:].copy(), "attention_mask": mask[1:].copy()}),
        ("three rows", {"input_ids": ids[[0, 1, 0]].copy(), "attention_mask": mask[[0, 1, 0]].copy()}),
        ("first again", feeds),
    ]


def _layout(m) -> tuple:
    """What a kept map read off its shapes (cached per shapes), as plain values."""
    if not isinstance(m, KeptMap):
        return ()
    return m.qbh, m.kbh, m.batch, {k: v.tolist() for k, v in m.fixed.items()}, sorted(m.side), sorted(m.side_kept)


def _assert_same_result(got: AttentionResult, want: AttentionResult, what: str) -> None:
    """Every field of the result equal: the maps' kind, shape, layout and every number, the sites, the model's
    outputs, the info (less the run's seconds) and the rest as they are."""
    for f in dataclasses.fields(AttentionResult):
        a, b = getattr(got, f.name), getattr(want, f.name)
        if f.name == "maps":
            assert [type(m) for m in a] == [type(m) for m in b], what
            for i, (ma, mb) in enumerate(zip(a, b)):
                assert ma.shape == mb.shape and _layout(ma) == _layout(mb), f"{what}: site {i}"
                np.testing.assert_allclose(ma.array(), mb.array(), atol=SAME, rtol=0, err_msg=f"{what}: site {i}")
        elif f.name == "outputs":
            assert a.keys() == b.keys(), what
            for k in a:
                np.testing.assert_array_equal(a[k], b[k], err_msg=f"{what}: output {k}")
        elif f.name == "info":
            assert {k: v for k, v in a.items() if k != "run_s"} == {k: v for k, v in b.items() if k != "run_s"}
        else:
            assert a == b, f"{what}: {f.name}"


@pytest.mark.parametrize(
    "mode, qk_device",
    [
        ("ondemand", "on"),  # Q and Kᵀ kept where onnxruntime wrote them (KeptMap: the CUDA path's code)
        ("ondemand", None),  # Q and Kᵀ brought to the host (RecomputeMap)
        ("dense", None),
    ],
)
def test_a_model_run_again_gives_a_fresh_models_result(hf_export, placement, monkeypatch, mode, qk_device):
    path, feeds, _, _ = hf_export("bert", "legacy", "eager", 17)
    if qk_device:
        monkeypatch.setenv("ATTNVIZ_QK_DEVICE", qk_device)
    else:
        monkeypatch.delenv("ATTNVIZ_QK_DEVICE", raising=False)
    m = rm.open_model(path, provider="cpu", threads=1)
    runs = []
    for what, f in _variants(feeds):
        runs.append((what, m.run(f, mode=mode), rm.open_model(path, provider="cpu", threads=1).run(f, mode=mode)))
        _assert_same_result(runs[-1][1], runs[-1][2], what)
    want_kind = {"on": KeptMap, None: RecomputeMap}[qk_device] if mode == "ondemand" else None
    assert want_kind is None or all(type(x) is want_kind for x in runs[0][1].maps)
    t, h = feeds["input_ids"].shape[1], runs[0][1].maps[0].shape[1]
    assert t > 5 and [r.maps[0].shape for _, r, _ in runs] == [
        (b, h, n, n) for b, n in ((2, t), (2, t), (2, 5), (1, t), (3, t), (2, t))
    ]
    for what, got, want in runs:  # each result still whole after the runs that came after it
        _assert_same_result(got, want, f"{what}, after the later runs")


def test_what_is_kept_follows_what_it_was_made_from(hf_export, placement, monkeypatch):
    path, feeds, _, _ = hf_export("bert", "legacy", "eager", 17)
    monkeypatch.setenv("ATTNVIZ_QK_DEVICE", "on")
    m = rm.open_model(path, provider="cpu", threads=1)
    first = m.run(feeds, mode="ondemand")
    fresh = rm.open_model(path, provider="cpu", threads=1)

    # a session made anew exposes its names in another object: the fetch list is worked out again for it
    exposed = m._sessions["ondemand"][1]
    m.close_session("ondemand")
    again = m.run(feeds, mode="ondemand")
    assert m._sessions["ondemand"][1] is not exposed and m._fetch["ondemand"][0] is m._sessions["ondemand"][1]
    _assert_same_result(again, first, "a session made anew")

    # another length: another layout (shapes, the head model's fixed shape feeds), the fresh model's
    short = {k: v[:, :5].copy() for k, v in feeds.items()}
    got = m.run(short, mode="ondemand")
    assert got.maps[0].shape[2:] == (5, 5) and got.maps[0].fixed[kept.K_SHAPE][-1] == 5
    _assert_same_result(got, fresh.run(short, mode="ondemand"), "5 tokens")

    # sites relabelled (a probe's state adopted), their stack alone: the next result's sites and the model's say so
    heads = [s.heads for s in m.sites]
    assert {s.stack for s in m.sites} == {"encoder"}
    assert m.adopt_probe((True, True, [("decoder", h) for h in heads]))
    assert [(s.stack, s.heads) for s in m.sites] == [("decoder", h) for h in heads]
    relabelled = m.run(feeds, mode="ondemand")
    assert [dataclasses.replace(s, stack="encoder") for s in relabelled.sites] == first.sites
    assert {s.stack for s in relabelled.sites} == {"decoder"}
    # and their head counts alone (the model's sites; a result's count the heads its maps have)
    assert m.adopt_probe((True, True, [("decoder", 7)] * len(heads)))
    assert [s.heads for s in m.sites] == [7] * len(heads)


def test_a_sites_info_follows_every_field_it_is_made_from(hf_export):
    path, _, _, _ = hf_export("bert", "legacy", "eager", 17)
    s = rm.open_model(path, provider="cpu").graph_sites[0]
    last = s.info()
    changes = [
        ("stack", "decoder"),
        ("kind", "cross"),
        ("layer", 5),
        ("heads", 3),
        ("node_name", "renamed"),
        ("method", "onnx-attention"),
    ]
    for field, value in changes:
        setattr(s, field, value)  # one field changed since the last info
        assert s.info() == SiteInfo(s.stack, s.kind, s.layer, s.heads, s.node_name, s.method) != last, field
        last = s.info()
    assert s.info(9).heads == 9 and s.info().heads == 3
    s.extra["tower"] = "text"
    assert (s.info().tower, s.info().window) == ("text", None)
    s.extra["window"] = "32-px windows"
    assert (s.info().tower, s.info().window) == ("text", "32-px windows")
    assert s.info() is s.info()  # nothing changed: the same (frozen) info


def _fused_qk_model(path, seed: int = 0):
    """The tiny model with each site's Q·Kᵀ a com.microsoft FusedMatMul with transB=1 and alpha=2 (K fed
    ``[B, H, T, d]``, not transposed), as onnxruntime's own fusions write it: the attributes every on-demand
    run reads (Graph.attributes), and a kept map's layout that takes its key length from Kᵀ's other axis."""
    tiny_text_model(path, heads=2, d=8, seed=seed)
    model = onnx.load(str(path))
    nodes = list(model.graph.node)
    for i, n in enumerate(nodes):
        if n.name.endswith("k_transpose"):
            del n.attribute[:]
            n.attribute.append(helper.make_attribute("perm", [0, 2, 1, 3]))
        if n.name.endswith("attn/MatMul"):
            nodes[i] = helper.make_node(
                "FusedMatMul", list(n.input), list(n.output), name=n.name, domain="com.microsoft", transB=1, alpha=2.0
            )
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    onnx.save(model, str(path))
    return path


def test_fused_qk_attributes_and_layouts_per_length(tmp_path, monkeypatch):
    """Each length's maps on demand (kept and brought to the host), from one model, are the dense run's
    probabilities (onnxruntime's own FusedMatMul and Softmax), and a run at another length does not change an
    earlier result's."""
    path = _fused_qk_model(tmp_path / "fused.onnx")
    m = rm.open_model(path, provider="cpu", threads=1)
    qk = [m.graph.producer[s.qk] for s in m.graph_sites]
    attrs = m.graph.attributes(qk[0])
    assert dict(attrs) == {"transB": 1, "alpha": 2.0} and m.graph.nodes[qk[0]].op_type == "FusedMatMul"
    with pytest.raises(TypeError):
        attrs["alpha"] = 1.0  # type: ignore[index]  # shared by every run: read-only
    ids = [np.array([[1, 3, 4, 5, 2]]), np.array([[1, 3, 4, 5, 6, 7, 8, 2], [1, 9, 8, 7, 6, 5, 4, 2]])]
    dense = [rm.open_model(path, provider="cpu").run({"input_ids": x}, mode="dense") for x in ids]
    for qk_device, kind in (("on", KeptMap), ("off", RecomputeMap)):
        monkeypatch.setenv("ATTNVIZ_QK_DEVICE", qk_device)
        m = rm.open_model(path, provider="cpu", threads=1)
        results = [m.run({"input_ids": x}, mode="ondemand") for x in ids]
        for r, d, x in zip(results, dense, ids):
            assert [type(mp) for mp in r.maps] == [kind, kind]
            for mp, want in zip(r.maps, d.maps):
                assert mp.shape == want.shape == (x.shape[0], 2, x.shape[1], x.shape[1])
                np.testing.assert_allclose(mp.array(), want.array(), atol=SAME, rtol=0)


@pytest.mark.parametrize("dtype", ["<i8", ">i8", "<i4", "|i1", "<i2", "<u8", "|u1"])
def test_token_ids_are_checked_in_one_pass_as_in_two(dtype):
    """The vocabulary check (one max of the ids seen as unsigned) refuses exactly the ids a max and a min refuse
    (an id at or past the vocabulary, a negative one), for every integer dtype, sizes past int8's included."""
    info = np.iinfo(np.dtype(dtype))
    candidates = {0, 1, 11, 12, 126, 127, 128, 200, -1, -2, -100, info.min, info.max}
    values = sorted(v for v in candidates if info.min <= v <= info.max)
    for vocab in (12, 127, 128, 200, 30522):
        for v in values:
            a = np.array([[1, v, 2]], dtype=dtype)
            refused = v >= vocab or v < 0  # the two-pass rule
            try:
                fc.check_values("input_ids", a, vocab)
            except Exception as e:
                assert refused, f"{dtype} id {v} vocab {vocab}: {e}"
                assert f"token id {v} in input 'input_ids' is out of range" in str(e)
            else:
                assert not refused, f"{dtype} id {v} vocab {vocab} passed"
