"""Corpus statistics computed inside onnxruntime (runtime/statgraph.py) equal `row_stats` on the same maps.

Each case runs the model once the dense way (maps out, reduced by `core.stats.row_stats` and the corpus's `_cols`)
and once through the statistics session, on the same padded batch, and compares: every counted row's value and
the key it would point an example at (the session's per-row outputs, asked for by tests only), then what a
worker really fetches: per item and head the sum over counted rows, the counts, the best row and its key.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "corpus"))

from onnx_builders import gqa_model, tiny_text_model
from planted import corpus_lines, planted_model

from attnviz.core.row_sums import ROW_TIE, ItemStats
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
