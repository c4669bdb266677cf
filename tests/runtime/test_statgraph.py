"""Corpus statistics computed inside onnxruntime (runtime/statgraph.py) equal `row_stats` on the same maps.

Each case runs the model once the dense way (maps out, reduced by `core.stats.row_stats` and the corpus's `_cols`)
and once through the statistics session, on the same padded batch, and compares: every counted row's value and
the key it would point an example at (the session's per-row outputs, asked for by tests only), then what a
worker really fetches: per item and head the sum over counted rows, the counts, the best row and its key.
"""

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).parents[1] / "corpus"))

from onnx_builders import gqa_model, tiny_text_model
from planted import corpus_lines, planted_model

from attnviz.core.row_sums import ROW_TIE, ItemStats, first_top_row
from attnviz.core.stats import ROW_STATS, row_stats
from attnviz.corpus.graph_reduce import InGraphReducer
from attnviz.corpus.reduce import BatchReducer, _cols, layout, signs
from attnviz.runtime import open_model
from attnviz.runtime import statgraph as sg

# float32 row values in both (as row_stats computes); the graph sums a row's weights in another order: measured
# max differences are ~1e-7 for values in [0, 1] (entropy, broad, masses, max) and ~1e-7 relative for the
# attended distance (up to T).  Per-item sums are float64 in both, so they add no error of their own.
ATOL, RTOL = 1e-6, 1e-6
# Entropy is -sum(p log p)/s + log s: when a model does not mask padded keys (the tiny test models), a short
# item's rows keep only a small real mass s and both sides cancel ~|log2 s| in float32 (numpy as much as the
# graph: neither is closer to the exact value), so entropy and broad get that much more slack there.
ENT_SLACK = 8 * float(np.finfo(np.float32).eps)


def _rel(a, b):
    return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(b)), initial=0.0))


def _compare(model, feeds, lengths, special, causal, in_graph_sites=None, join=False):
    """Dense maps + row_stats vs the statistics session; returns the reducer and the worst relative difference
    of (row values, per-item sums).  ``join``: one set of statistic nodes for all sites (the CUDA layout)."""
    model.probe()
    groups = layout(model.sites)
    maps = [m.array() for m in model.run(feeds, mode="dense").maps]
    red = InGraphReducer.build(model, groups, rows=True, join=join)
    assert red is not None
    if in_graph_sites is not None:
        assert sorted(red.outputs) == in_graph_sites
    t = maps[groups[0].site].shape[-1]
    sp = np.zeros((len(lengths), t), bool) if special is None else special
    real = np.arange(t)[None, :] < lengths[:, None]
    got, extra, positions, _ = red.run(feeds, lengths, sp, causal)
    items = red.items(feeds, lengths, sp, causal)
    assert [g for g, _ in items] == groups
    heads = np.cumsum([0] + [g.heads for g in groups if g.site in red.outputs])
    at = {i: slice(heads[j], heads[j + 1]) for j, i in enumerate(red.outputs)}
    worst_row = worst_item = 0.0
    for g, st in items:
        p = maps[g.site]
        want, want_ok = row_stats(p, lengths, sp, causal)

        def key_of(name, rows, p=p):
            return _cols(name, p, rows, real, sp)

        mass = (p * real[:, None, None, :]).sum(-1)  # [B, H, T]
        slack = {n: np.zeros(p.shape[:3]) for n in ROW_STATS}
        for n in ("entropy", "broad"):
            slack[n] = ENT_SLACK * np.abs(np.log2(np.maximum(mass, 1e-30)))
        if g.site in red.outputs:
            values, keys = got[sg.VALUES][:, at[g.site]], got[sg.KEYS][:, at[g.site]]
            for s, name in enumerate(ROW_STATS):
                ok = np.broadcast_to(want_ok[name][:, None, :], p.shape[:3])
                a, b = values[..., s][ok], want[name][ok]
                atol = ATOL + slack[name][ok]
                assert np.all(np.abs(a - b) <= atol + RTOL * np.abs(b)), (g.site, name, np.abs(a - b).max())
                worst_row = max(worst_row, _rel(a, b))
            for r in range(t):  # the key every row would point an example at
                rows = np.full((*p.shape[:2], len(ROW_STATS)), r)
                at_r = sg.item_stats(st.sums, np.concatenate([rows, keys[:, :, r]], -1), extra, positions)
                for s, name in enumerate(ROW_STATS):
                    assert np.array_equal(at_r.keys[..., s], key_of(name, rows[..., s])), (g.site, name, r)
        sign = signs(g.kind)  # best rows at each statistic's interesting end (lowest entropy)
        ref = ItemStats.from_rows(want, want_ok, key_of, tie=True, signs=sign)
        assert np.array_equal(st.counts, ref.counts)
        item_slack = np.stack([(slack[n] * want_ok[n][:, None, :]).sum(-1) for n in ROW_STATS], -1)
        assert np.all(np.abs(st.sums - ref.sums) <= ATOL + item_slack + RTOL * np.abs(ref.sums))
        worst_item = max(
            worst_item, _rel(st.sums / np.maximum(st.counts[:, None], 1), ref.sums / np.maximum(ref.counts[:, None], 1))
        )
        for s, name in enumerate(ROW_STATS):
            v = np.where(want_ok[name][:, None, :], sign[s] * want[name], -np.inf)
            best = v.max(-1)
            chosen = np.take_along_axis(v, st.rows[..., s, None], -1)[..., 0]
            scale = np.maximum(1.0, np.abs(best))
            noise = np.max(slack[name], -1)  # 0 but for entropy of rows with a small real mass
            clear = ROW_TIE / 2 * scale - noise  # a row this close to the best is tied whatever the noise
            with np.errstate(invalid="ignore"):
                # the chosen row ties with the best one (float32 noise is ~1e-7, far inside ROW_TIE) ...
                assert np.all(chosen >= best - 2 * ROW_TIE * scale - noise), (g.site, name)
                # ... and no clearly tied row comes before it
                before = np.arange(t)[None, None, :] < st.rows[..., s, None]
                tied = (v >= (best - clear)[..., None]) & (clear > 0)[..., None]
                assert not np.any(before & tied), (g.site, name)
            assert np.array_equal(st.keys[..., s], key_of(name, st.rows[..., s])), (g.site, name)
    return red, (worst_row, worst_item)


def _planted_batch(tmp_path, batch=7):
    model = planted_model(tmp_path / "planted.onnx")
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(corpus_lines(batch)) + "\n")
    from attnviz.corpus.items import read_texts
    from attnviz.corpus.plan import encode_items, plan_text

    red = BatchReducer(str(model), "cpu", None, 1, 5, in_graph=False)
    items = read_texts(texts)
    specs = plan_text(items, encode_items(red.model, items), None, None, batch, equal_lengths=False)
    return red, specs


@pytest.mark.parametrize("join", [False, True])
def test_planted_encoder_padded_batch_equals_row_stats(tmp_path, join):
    red, specs = _planted_batch(tmp_path)
    feeds, lengths, special = red.feeds(specs[0])
    assert len(set(lengths.tolist())) > 1  # really padded
    _, worst = _compare(red.model, feeds, lengths, special, causal=False, in_graph_sites=[0, 1], join=join)
    assert max(worst) < 1e-6


def test_batch_reducer_partials_equal_the_maps_path(tmp_path):
    """The whole partial (per-head sums, counts, top-k) from the statistics session vs from maps."""
    a, specs = _planted_batch(tmp_path, batch=16)
    b = BatchReducer(str(a.model.path), "cpu", None, 1, 5)
    for spec in specs:
        pa, pb = a(spec), b(spec)
        assert isinstance(b.in_graph, InGraphReducer)
        assert np.array_equal(pa.counts, pb.counts)
        np.testing.assert_allclose(pb.sums, pa.sums, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(pb.top_value, pa.top_value, rtol=1e-6, atol=1e-6)
        # item order may swap only between exact ties (a uniform head scores 1 ± 1e-7 on every item)
        swapped = pa.top_item != pb.top_item
        assert np.all(np.abs(pa.top_value - pb.top_value)[swapped] < 1e-6)
        assert np.array_equal(
            pa.top_col[~swapped & (pa.top_row == pb.top_row)], pb.top_col[~swapped & (pa.top_row == pb.top_row)]
        )
    assert "dense" not in b.model._sessions  # one session of the model per worker, not two


@pytest.mark.parametrize("join", [False, True])
def test_causal_decoder_with_padding(tmp_path, join):
    path = tiny_text_model(tmp_path / "dec.onnx", layers=2, heads=2, causal=True, classifier=False)
    m = open_model(path, provider="cpu")
    rng = np.random.default_rng(1)
    ids = rng.integers(3, 8, (3, 9))
    lengths = np.array([9, 4, 6])
    special = np.zeros((3, 9), bool)
    special[:, 0] = True
    special[np.arange(3), lengths - 1] = True
    _compare(m, {m.inputs[0].name: ids}, lengths, special, causal=True, in_graph_sites=[0, 1], join=join)


def test_grouped_query_attention_probabilities(tmp_path):
    """com.microsoft GroupQueryAttention hands out post-softmax probabilities: read in the graph too."""
    path, feeds, _ = gqa_model(tmp_path / "gqa.onnx", seq=6)
    m = open_model(path, provider="cpu")
    lengths = np.array([6])
    _compare(m, feeds, lengths, None, causal=m.kind == "decoder", in_graph_sites=[0])


def test_a_site_left_to_numpy_is_reduced_from_its_map(tmp_path, monkeypatch):
    """Per site: a site the statistics nodes do not take keeps its map, and reduces the old way."""
    red, specs = _planted_batch(tmp_path)
    real = sg.supported
    monkeypatch.setattr(sg, "supported", lambda g, s: real(g, s) and s.layer == 0)
    feeds, lengths, special = red.feeds(specs[0])
    r, _ = _compare(red.model, feeds, lengths, special, causal=False, in_graph_sites=[0], join=True)
    assert r.exposed.outputs[1] in r.fetch  # layer 1's probabilities still come out


@pytest.mark.parametrize("arch,join", [("minilm", False), ("gpt2", False), ("minilm", True)])
def test_real_exports_padded(hf_export, arch, join):
    """Random-init GPT-2 (causal) and the real pretrained MiniLM, exported by torch: padded batch of 3."""
    path, feeds, _, _ = hf_export(arch, "legacy", "eager", 17)
    m = open_model(path, provider="cpu")
    rng = np.random.default_rng(0)
    t = 11
    ids = rng.integers(5, 90, (3, t))
    lengths = np.array([t, 7, 4])
    mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.int64)
    f = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in feeds:
        f["token_type_ids"] = np.zeros_like(ids)
    special = np.zeros((3, t), bool)
    special[:, 0] = True
    special[np.arange(3), lengths - 1] = True
    causal = arch == "gpt2"
    assert m.kind == ("decoder" if causal else "encoder")
    _compare(m, f, lengths, special, causal, in_graph_sites=list(range(len(m.sites))), join=join)


def test_vision_transformer_cls_special(hf_export):
    path, feeds, _, _ = hf_export("vit", "legacy", "eager", 17)
    m = open_model(path, provider="cpu")
    px = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    t = 17  # 4×4 patches + CLS
    special = np.zeros((2, t), bool)
    special[:, 0] = True
    _compare(m, {"pixel_values": px}, np.full(2, t), special, causal=False, in_graph_sites=[0, 1], join=True)


def test_image_corpus_uses_the_statistics_session_after_its_first_batch(hf_export, tmp_path):
    """Images: the first batch learns the token count (and CLS) from its maps, the next ones run in the graph."""
    from attnviz.corpus.plan import BatchSpec

    path, _, _, _ = hf_export("vit", "legacy", "eager", 17)
    from PIL import Image

    rng = np.random.default_rng(0)
    files = []
    for i in range(4):
        f = tmp_path / f"{i}.png"
        Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(f)
        files.append(str(f))
    a = BatchReducer(str(path), "cpu", None, 1, 2, in_graph=False)
    b = BatchReducer(str(path), "cpu", None, 1, 2)
    for i in range(2):
        spec = BatchSpec(batch_id=i, items=[2 * i, 2 * i + 1], images=files[2 * i : 2 * i + 2])
        pa, pb = a(spec), b(spec)
        np.testing.assert_allclose(pb.sums, pa.sums, rtol=1e-6, atol=1e-6)
        assert np.array_equal(pa.counts, pb.counts)
    assert isinstance(b.in_graph, InGraphReducer)


def test_work_after_the_last_attention_map_is_not_run(tmp_path):
    """The statistics session drops the model's outputs and the nodes only they needed (the classifier here)."""
    path = tiny_text_model(tmp_path / "cls.onnx", layers=2, heads=2, classifier=True)
    m = open_model(path, provider="cpu")
    m.probe()
    stats, _, outs = sg.stats_model(m.graph, m._sites, {0, 1})
    made = {o for n in stats.graph.node for o in n.output}
    assert sorted(outs) == [0, 1] and m.outputs and not any(o.name in made for o in m.outputs)
    assert len([n for n in stats.graph.node if not n.name.startswith("attnviz_stat")]) < len(m.proto.graph.node)


@pytest.mark.parametrize("causal", [False, True])
def test_one_head_and_items_with_no_counted_rows(tmp_path, causal):
    """One head per site, and items of 1 and 0 tokens: "prev", "next" and "broad" count no row there, so the
    item's sum and count are 0 and its best row is row 0 (as numpy's argmax of all -inf)."""
    path = tiny_text_model(tmp_path / "one.onnx", layers=2, heads=1, causal=causal, classifier=False)
    m = open_model(path, provider="cpu")
    ids = np.random.default_rng(3).integers(3, 8, (4, 7))
    lengths = np.array([7, 1, 0, 2])
    special = np.zeros((4, 7), bool)
    special[[0, 3], 0] = True
    red, _ = _compare(m, {m.inputs[0].name: ids}, lengths, special, causal, in_graph_sites=[0, 1], join=causal)
    st = dict(red.items({m.inputs[0].name: ids}, lengths, special, causal))[layout(m.sites)[0]]
    for name in ("prev", "next", "broad"):
        s = ROW_STATS.index(name)
        assert np.all(st.counts[1:3, s] == 0) and np.all(st.sums[1:3, :, s] == 0) and np.all(st.rows[1:3, :, s] == 0)
    assert np.all(st.counts[2] == 0)


def test_long_rows_minilm_error_stays_inside_the_tolerance(hf_export):
    """The real MiniLM on 120-token rows (the longest batches of a corpus): the graph's row values and per-item
    means stay within 1e-6 relative of row_stats'; the measured worst is printed (-s) for bench/RESULTS.md."""
    path, feeds, _, _ = hf_export("minilm", "legacy", "eager", 17)
    m = open_model(path, provider="cpu")
    t = 120
    ids = np.random.default_rng(4).integers(1000, 20000, (2, t))
    lengths = np.array([t, 97])
    mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.int64)
    special = np.zeros((2, t), bool)
    special[:, 0] = True
    special[np.arange(2), lengths - 1] = True
    f = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    _, (row, item) = _compare(m, f, lengths, special, False)
    print(f"\nMiniLM T={t}: worst relative difference, row values {row:.2e}, per-item means {item:.2e}")
    assert row < 1e-6 and item < 1e-6


def _maps_model(path, heads=3, sites=2, bias=False):
    """Attention maps the test chooses: site l is softmax(scores_l) over keys (``scores_l [B, heads, T, T]`` an
    input, read through a Q·Kᵀ MatMul against the identity, then a P·V MatMul), so attnviz finds self-attention
    sites whose maps are whatever the scores say (-1e4 gives exact zeros, equal scores exact ties).  ``bias``: an
    input ``bias [B, 1, T, T]`` added to every site's scores after the MatMul (a mask of -inf: the MatMul against
    the identity would make -inf·0 = NaN of a score)."""
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info(f"scores{i}", f, ["B", heads, "T", "T"]) for i in range(sites)]
    if bias:
        inputs.append(helper.make_tensor_value_info("bias", f, ["B", 1, "T", "T"]))
    inputs.append(helper.make_tensor_value_info("v", f, ["B", heads, "T", 2]))
    inits = [numpy_helper.from_array(np.array([k], np.int64), n) for n, k in (("two", 2), ("four", 4))]
    zero = numpy_helper.from_array(np.array([0.0], np.float32))
    nodes = [
        helper.make_node("Shape", ["scores0"], ["shape"]),
        helper.make_node("Slice", ["shape", "two", "four"], ["tt"]),
        helper.make_node("ConstantOfShape", ["tt"], ["zeros"], value=zero),
        helper.make_node("EyeLike", ["zeros"], ["eye"]),
    ]
    outputs = []
    for i in range(sites):
        p = f"/encoder/layers.{i}/attn/"
        nodes.append(helper.make_node("MatMul", [f"scores{i}", "eye"], [p + "qk"], name=p + "MatMul"))
        if bias:
            nodes.append(helper.make_node("Add", [p + "qk", "bias"], [p + "qkm"], name=p + "Add"))
        nodes += [
            helper.make_node("Softmax", [p + ("qkm" if bias else "qk")], [p + "probs"], axis=-1, name=p + "Softmax"),
            helper.make_node("MatMul", [p + "probs", "v"], [p + "ctx"], name=p + "MatMul_1"),
        ]
        outputs.append(helper.make_tensor_value_info(p + "ctx", f, None))
    graph = helper.make_graph(nodes, "maps", inputs, outputs, inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _planted_scores(lengths, special, t, seed):
    """Two sites x three heads of scores [B, 3, T, T]: random rows; rows put wholly on the previous key, the
    key itself, the next key or key 0 in turn (exact 0s and 1s); uniform rows (every weight tied, every row of
    an item tied); two equal largest weights per row; equal weights on every special key; and a model that
    does not mask padding (large weights on padded keys, and rows whose real keys all weigh 0)."""
    rng = np.random.default_rng(seed)
    b = len(lengths)
    ar = np.arange(t)
    real = ar[None, :] < lengths[:, None]
    neg = np.float32(-1e4)
    s0 = np.zeros((b, 3, t, t), np.float32)
    s0[:, 0] = rng.standard_normal((b, t, t)) * 2
    target = np.select([ar % 4 == 0, ar % 4 == 1, ar % 4 == 2], [ar - 1, ar, ar + 1], 0).clip(0, t - 1)
    s0[:, 1] = neg
    s0[:, 1, ar, target] = 0.0
    s0[:, 2] = 1.5  # uniform: the model's own mask below leaves the real keys tied
    s1 = np.zeros((b, 3, t, t), np.float32)
    j1, j2 = rng.integers(0, t, (b, t)), rng.integers(0, t, (b, t))
    s1[:, 0] = rng.standard_normal((b, t, t))
    bi, qi = np.meshgrid(np.arange(b), ar, indexing="ij")
    s1[bi, 0, qi, j1] = 6.0
    s1[bi, 0, qi, j2] = 6.0
    s1[:, 1] = np.where(special[:, None, :], 3.0, rng.standard_normal((b, t, t)) * 0.1)
    s1[:, 2] = rng.standard_normal((b, t, t))
    s1[:, 2] += np.where(real, 0.0, 4.0)[:, None, :]  # padded keys keep most of the mass
    s1[:, 2, 1::3] = np.where(real, neg, 0.0)[:, None, :]  # every third row: no mass on real keys at all
    # the model's own padding mask, as a real export adds it (not on the last head: an unmasked model)
    mask = np.where(real, 0.0, neg).astype(np.float32)[:, None, None, :]
    s0 += mask
    s1[:, :2] += mask
    return s0, s1


@pytest.mark.parametrize("join", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_planted_and_random_maps_with_ties_equal_row_stats(tmp_path, join, causal):
    """Maps chosen directly (random, planted one-hot rows, uniform rows, tied largest weights, tied special
    keys, unmasked padding and rows with no real mass), padded items of every length down to 0 and special
    keys (CLS, SEP, one in the middle, none): every counted row's value, the key of every row, per-item sums,
    counts, best rows and their keys equal row_stats' and the maps path's, in both layouts."""
    m = open_model(_maps_model(tmp_path / "maps.onnx"), provider="cpu")
    t = 9
    lengths = np.array([9, 6, 1, 0, 2, 8, 5])
    b = len(lengths)
    ar = np.arange(t)
    special = np.zeros((b, t), bool)
    special[:, 0] = lengths > 0
    special[np.arange(b), np.maximum(lengths - 1, 0)] = lengths > 0
    special[0, 4] = special[5, 3] = True  # a special key in the middle
    special[1] = False  # an item without special keys
    special[6, 1:] = False  # only CLS: "special_other" has no key
    special &= ar[None, :] < lengths[:, None]
    for seed in range(3):
        s0, s1 = _planted_scores(lengths, special, t, seed)
        feeds = {"scores0": s0, "scores1": s1, "v": np.zeros((b, 3, t, 2), np.float32)}
        _compare(m, feeds, lengths, special, causal, in_graph_sites=[0, 1], join=join)


def _session(graph, opset=17):
    import onnxruntime as ort

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_best_rows_are_the_first_within_row_tie_of_the_best():
    """The per-item reduction alone (statgraph._item_nodes, fed signed row values as the graph makes them: 0 on
    rows that do not count; OFF with rows last) on planted values around best rows of every size and sign:
    the sums and the first row within ROW_TIE·max(1, |best|) of the best (core.row_sums.first_top_row)."""
    b, h, t, s = 4, 3, 12, len(ROW_STATS)
    graph = helper.make_graph(
        [],
        "items",
        [
            helper.make_tensor_value_info("values", TensorProto.FLOAT, [b, h, t, s]),
            helper.make_tensor_value_info(sg.OFF, TensorProto.FLOAT, [b, 1, s, t]),
        ],
        [],
    )
    nd = sg._Nodes(graph, "x_")
    sums, rows = sg._item_nodes(nd, "values", 17)
    graph.output.extend(
        [
            helper.make_tensor_value_info(sums, TensorProto.DOUBLE, None),
            helper.make_tensor_value_info(rows, TensorProto.INT64, None),
        ]
    )
    sess = _session(graph)
    rng = np.random.default_rng(0)
    for _ in range(20):
        # each (item, head, statistic): a best value of some size at its interesting end, the other rows at
        # 0, 0.3, 0.7, 1.4, 2.5 or 10 times the tie slack below it (in the signed order), in random rows
        scale = rng.choice([0.3, 1.0, 7.0, 150.0], (b, h, 1, s))
        best = scale * sg.SIGN[:, None].T  # signed values of the interesting end: -entropy, +everything else
        slack = ROW_TIE * np.maximum(1.0, np.abs(best))
        v = (best - rng.choice([0.0, 0.3, 0.7, 1.4, 2.5, 10.0], (b, h, t, s)) * slack).astype(np.float32)
        ok = rng.random((b, 1, t, s)) < 0.8
        ok[1, :, :, 3] = False  # an item with no counted row: row 0
        values = np.where(ok, v, np.float32(0))
        off = np.where(ok, 0.0, -np.inf).astype(np.float32)
        got_sums, got_rows = sess.run([sums, rows], {"values": values, sg.OFF: off.transpose(0, 1, 3, 2).copy()})
        np.testing.assert_allclose(got_sums, values.astype(np.float64).sum(2), rtol=1e-12)
        want = first_top_row(np.moveaxis(np.where(ok, v.astype(np.float64), -np.inf), 2, -1))  # [B, H, S]
        assert np.array_equal(got_rows, want)
        assert np.all(want[1, :, 3] == 0)


@pytest.mark.parametrize("opset", [11, 17])
def test_keys_are_read_at_the_best_rows_only(opset):
    """statgraph._keys_at alone: at each statistic's row, the real key with the largest weight (the first of
    equal ones: weights drawn from a few values, so rows have ties), the special slot with the largest weight
    after the statistic's offsets (SP_OFF), and the row itself for the statistics whose key follows from it;
    against numpy's argmax over the same row.  Rows are read with GatherND from opset 12, else GatherElements."""
    b, h, t, k, s = 3, 4, 9, 7, len(ROW_STATS)
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    graph = helper.make_graph(
        [],
        "keys",
        [
            helper.make_tensor_value_info("pm", f, [b, h, t, t]),
            helper.make_tensor_value_info("kw", f, [b, h, t, k]),
            helper.make_tensor_value_info("rows", i64, [b, h, s]),
            helper.make_tensor_value_info(sg.SP_OFF, f, [b, 1, 2, k]),
        ],
        [],
    )
    nd = sg._Nodes(graph, "x_")
    keys = sg._keys_at(nd, "pm", "kw", "rows", opset)
    graph.output.append(helper.make_tensor_value_info(keys, i64, None))
    assert any(n.op_type == ("GatherND" if opset >= 12 else "GatherElements") for n in graph.node)
    sess = _session(graph, opset)
    rng = np.random.default_rng(1)
    n_cols = len(sg.KEY_COLUMNS)
    for _ in range(10):
        pm = rng.choice([0.0, 0.1, 0.25, 0.5], (b, h, t, t)).astype(np.float32)
        kw = rng.choice([0.0, 0.2, 0.4], (b, h, t, k)).astype(np.float32)
        rows = rng.integers(0, t, (b, h, s))
        off = np.full((b, 1, 2, k), -np.inf, np.float32)
        off[:, :, :, n_cols:] = rng.choice([0.0, -2.0], (b, 1, 2, k - n_cols))
        got = sess.run([keys], {"pm": pm, "kw": kw, "rows": rows, sg.SP_OFF: off})[0]
        bi, hi = np.meshgrid(np.arange(b), np.arange(h), indexing="ij")
        for st, name in enumerate(ROW_STATS):
            r = rows[..., st]
            if name in ("special", "special_other"):
                want = (kw[bi, hi, r] + off[:, 0, ROW_STATS.index(name) - sg._SP][:, None]).argmax(-1)
            elif st in sg.REAL_KEYED:
                want = pm[bi, hi, r].argmax(-1)
            else:
                want = r
            assert np.array_equal(got[..., st], want), name


def test_each_sites_statistics_run_before_the_model_reads_its_map_on(tmp_path, monkeypatch):
    """onnxruntime orders nodes by the data, not by the node list: statistics merely appended ran after the whole
    model (the last site's first), so every map stayed alive until then (about twice a MiniLM batch's peak,
    bench/RESULTS.md).  The model's readers of each map now wait for its statistics: in onnxruntime's own
    execution order (its profiler's events) each site's statistics finish before a later model node runs and come
    in site order; the graph stays a valid, sorted ONNX graph; and its outputs are bit for bit those of the same
    graph without the edit."""
    import json

    import onnxruntime as ort

    path = tiny_text_model(tmp_path / "m.onnx", layers=3, heads=2, classifier=False)
    m = open_model(path, provider="cpu")
    m.probe()
    sites = set(range(len(m.sites)))
    stats, _, on = sg.stats_model(m.graph, m._sites, sites)
    assert on == [0, 1, 2]
    known = {i.name for i in stats.graph.input} | {t.name for t in stats.graph.initializer} | {""}
    for n in stats.graph.node:  # still in topological order, as ONNX requires
        assert all(t in known for t in n.input), n.name
        known.update(n.output)
    ids = np.random.default_rng(5).integers(3, 8, (3, 9))
    lengths = np.array([9, 5, 2])
    special = np.zeros((3, 9), bool)
    special[:, 0] = True
    extra, _ = sg.stat_feeds(lengths, special, 9)
    feeds = {m.inputs[0].name: ids, **extra}

    def run(model, profile=""):
        so = ort.SessionOptions()
        if profile:
            so.enable_profiling, so.profile_file_prefix = True, str(tmp_path / profile)
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        names = {i.name for i in sess.get_inputs()}
        out = sess.run([sg.SUMS, sg.PICKS], {k: v for k, v in feeds.items() if k in names})
        return out, (sess.end_profiling() if profile else "")

    got, prof = run(stats, "order")
    events = [e for e in json.loads(Path(prof).read_text()) if e.get("cat") == "Node" and e["name"].endswith("_time")]
    names = list(dict.fromkeys(e["name"][: -len("_kernel_time")] for e in events if e["name"].endswith("_kernel_time")))
    at = {i: [k for k, n in enumerate(names) if n.startswith(f"attnviz_stat{i}_")] for i in on}
    model_nodes = [k for k, n in enumerate(names) if not n.startswith("attnviz_stat")]
    assert all(at[i] for i in on)
    assert max(at[0]) < min(at[1]) and max(at[1]) < min(at[2])  # in site order (it was the reverse)
    assert max(at[0]) < max(model_nodes) and max(at[1]) < max(model_nodes)  # before the model went on

    monkeypatch.setattr(sg, "_run_in_turn", lambda *a: None)
    plain, _, _ = sg.stats_model(m.graph, m._sites, sites)
    want, _ = run(plain)
    assert all(np.array_equal(a, b) for a, b in zip(got, want))


def _stats_session(stats, profile=None, force_exact=False):
    """An onnxruntime session of a statistics model (profiled to files named ``profile``...); ``force_exact``: every site's If
    takes its exact branch whatever the batch."""
    import onnxruntime as ort

    stats = onnx.ModelProto.FromString(stats.SerializeToString())
    ifs = [n for n in stats.graph.node if n.op_type == "If"]
    if force_exact:
        true = helper.make_tensor("", TensorProto.BOOL, [], [1])
        stats.graph.node.insert(0, helper.make_node("Constant", [], ["always"], value=true))
        for n in ifs:
            n.input[0] = "always"
    so = ort.SessionOptions()
    if profile is not None:
        so.enable_profiling, so.profile_file_prefix = True, str(profile)
    return ort.InferenceSession(stats.SerializeToString(), so, providers=["CPUExecutionProvider"]), len(ifs)


def test_near_one_hot_rows_keep_their_entropy_relative_to_it(tmp_path):
    """Focused rows (one key ~1 - 3e-7, entropy 2e-6 to 6e-5 bits) on scores of +-60 (|x|·eps ~4e-6 nats: a form
    that cancels the scores, sum p·x - s·(max x - ln max p), is off by about the entropy): every counted row's
    entropy and each item's entropy sum stay within 10 % of a float64 hand computation on the same float32 maps
    (-sum q log2 q, q the row over its real keys).  What is left is float32's ln s of a row sum ~1 (~1e-7 bits,
    main's Log path the same: 5.5 % at worst here)."""
    m = open_model(_maps_model(tmp_path / "maps.onnx"), provider="cpu")
    m.probe()
    b, t = 3, 9
    lengths = np.array([9, 7, 5])
    ar = np.arange(t)
    real = ar[None, :] < lengths[:, None]
    rng = np.random.default_rng(2)
    target = rng.integers(0, lengths[:, None], (b, t))  # each row's focus, a real key
    focus = np.where(ar[None, None, :] == target[:, :, None], 0.0, -17.0)  # [B, T, T]
    s0 = np.empty((b, 3, t, t), np.float32)
    s0[:, 0] = 60 + focus
    s0[:, 1] = -60 + focus + rng.uniform(-0.5, 0.5, (b, t, t))  # uneven small weights, negative scores
    s0[:, 2] = 60 + focus - 3 * (ar[None, None, :] % 2)  # two levels of small weights
    s0 += np.where(real, 0.0, -1e4).astype(np.float32)[:, None, None, :]
    feeds = {"scores0": s0, "scores1": s0[:, ::-1].copy(), "v": np.zeros((b, 3, t, 2), np.float32)}
    p = m.run(feeds, mode="dense").maps[0].array().astype(np.float64) * real[:, None, None, :]
    q = p / p.sum(-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = -np.where(q > 0, q * np.log2(q), 0.0).sum(-1)  # [B, H, T]
    counted = np.broadcast_to(real[:, None, :], want.shape)
    assert 1e-6 < want[counted].min() and want[counted].max() < 1e-4  # focused rows indeed
    red = InGraphReducer.build(m, layout(m.sites), rows=True)
    special = np.zeros((b, t), bool)
    got, _, _, _ = red.run(feeds, lengths, special, False)
    e = ROW_STATS.index("entropy")
    rows = got[sg.VALUES][:, :3, :, e]
    assert np.all(np.abs(rows - want)[counted] <= 0.1 * want[counted]), np.max(np.abs(rows / want - 1)[counted])
    st = dict(red.items(feeds, lengths, special, False))[layout(m.sites)[0]]
    sums = (want * counted).sum(-1)
    assert np.all(np.abs(st.sums[..., e] - sums) <= 0.1 * sums)


def test_the_unmasked_sets_are_checked_and_recomputed_exactly(tmp_path):
    """Sites whose maps are a Softmax's own output skip the mask Mul and the Clip unless the batch needs them: on
    batches whose model masks padding with -1e4 (padded weights exactly 0, finite scores) the If's exact branch
    does not run and the outputs are bit for bit those of that branch; on scores of -inf (padding and a causal
    mask) and on an unmasked model (weight on padded keys) it runs, and the values equal row_stats'."""
    import json

    m = open_model(_maps_model(tmp_path / "maps.onnx", bias=True), provider="cpu")
    m.probe()
    stats, _, on = sg.stats_model(m.graph, m._sites, set(range(len(m.sites))), rows=True)
    assert on == [0, 1]
    b, t = 4, 9
    lengths = np.array([9, 6, 2, 1])
    ar = np.arange(t)
    real = ar[None, :] < lengths[:, None]
    special = np.zeros((b, t), bool)
    special[:, 0] = True
    rng = np.random.default_rng(7)
    scores = {f"scores{i}": rng.standard_normal((b, 3, t, t)).astype(np.float32) * 2 for i in range(2)}
    causal = ar[None, :] <= ar[:, None]
    cases = {  # the bias, whether the batch needs the exact branch
        "masked -1e4": (np.where(real[:, None, None, :], 0.0, -1e4), False),
        "-inf": (np.where(real[:, None, None, :] & causal, 0.0, -np.inf), True),
        "unmasked": (np.zeros((b, 1, t, t)), True),
    }
    extra, _ = sg.stat_feeds(lengths, special, t, causal=True)
    fetch = [sg.SUMS, sg.PICKS, sg.VALUES, sg.KEYS]
    for k, (label, (bias, exact)) in enumerate(cases.items()):
        feeds = {**scores, "v": np.zeros((b, 3, t, 2), np.float32), "bias": bias.astype(np.float32)}
        sess, ifs = _stats_session(stats, tmp_path / f"prof{k}")
        assert ifs == 2
        names = {i.name for i in sess.get_inputs()}
        got = sess.run(fetch, {n: v for n, v in {**feeds, **extra}.items() if n in names})
        prof = json.loads(Path(sess.end_profiling()).read_text())
        ran = {e["name"] for e in prof if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")}
        for i in on:
            assert any(n.startswith(f"attnviz_stat{i}_exact_") for n in ran) == exact, (label, i)
        always, _ = _stats_session(stats, force_exact=True)
        want = always.run(fetch, {n: v for n, v in {**feeds, **extra}.items() if n in names})
        assert all(np.array_equal(a, w) for a, w in zip(got, want)), label
        assert not np.isnan(got[0]).any(), label
        _compare(m, feeds, lengths, special, True, in_graph_sites=[0, 1])


def test_a_map_the_batch_shares_gives_each_item_the_statistics_of_its_own_copy(tmp_path):
    """A map with a leading axis of 1 for a batch of 3 (the model's attention does not depend on the item): the
    unmasked set reads p itself, so its per-row values and each item's best rows' keys come from that one map;
    they equal those of the same map repeated for every item (keys and best rows exactly, values within the
    tests' tolerance), on a batch that masks padding and one that does not (the If's exact branch)."""
    m = open_model(_maps_model(tmp_path / "maps.onnx"), provider="cpu")
    m.probe()
    stats, _, _ = sg.stats_model(m.graph, m._sites, set(range(len(m.sites))), rows=True)
    sess, _ = _stats_session(stats)
    t = 9
    lengths = np.array([9, 6, 4])
    special = np.zeros((3, t), bool)
    special[:, [0, 3]] = True
    extra, _ = sg.stat_feeds(lengths, special, t)
    names = {i.name for i in sess.get_inputs()}
    rng = np.random.default_rng(4)
    for pad in (-1e4, 0.0):
        shared = {
            f"scores{i}": rng.standard_normal((1, 3, t, t)).astype(np.float32) + np.where(np.arange(t) < 4, 0, pad)
            for i in range(2)
        }
        shared = {k: v.astype(np.float32) for k, v in shared.items()}
        each = {k: np.repeat(v, 3, axis=0) for k, v in shared.items()}
        out = []
        for scores in (shared, each):
            feeds = {**scores, "v": np.zeros((len(scores["scores0"]), 3, t, 2), np.float32), **extra}
            out.append(
                sess.run([sg.SUMS, sg.PICKS, sg.VALUES, sg.KEYS], {n: v for n, v in feeds.items() if n in names})
            )
        (sums, picks, values, keys), want = out
        assert np.array_equal(picks, want[1]) and np.array_equal(keys, want[3]), pad
        # (onnxruntime's kernels broadcast the shared map another way: the last bit may differ)
        np.testing.assert_allclose(values, want[2], rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(sums, want[0], rtol=RTOL, atol=ATOL)
