"""Corpus row statistics computed inside onnxruntime (runtime/statgraph.py) equal `row_stats` on the same maps.

Each case runs the model once the dense way (maps out, reduced by `core.stats.row_stats` and the corpus's `_cols`)
and once through the statistics session (only [B, H, T, k] sums leave it), on the same padded batch.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "corpus"))

from onnx_builders import gqa_model, tiny_text_model
from planted import corpus_lines, planted_model

from attnviz.core.stats import ROW_STATS, row_stats
from attnviz.corpus.graph_reduce import InGraphReducer
from attnviz.corpus.reduce import BatchReducer, _cols, layout
from attnviz.runtime import open_model
from attnviz.runtime import statgraph as sg

# float32 in both (as row_stats computes); the graph sums in another order: measured max differences are ~1e-7
# for values in [0, 1] (entropy, broad, masses, max) and ~1e-7 relative for the attended distance (up to T)
ATOL, RTOL = 1e-6, 1e-6


def _compare(model, feeds, lengths, special, causal, in_graph_sites=None):
    """Dense maps + row_stats vs the statistics session, every statistic of every counted row."""
    model.probe()
    groups = layout(model.sites)
    maps = [m.array() for m in model.run(feeds, mode="dense").maps]
    red = InGraphReducer.build(model, groups)
    assert red is not None
    if in_graph_sites is not None:
        assert sorted(red.outputs) == in_graph_sites
    t = maps[groups[0].site].shape[-1]
    sp = np.zeros((len(lengths), t), bool) if special is None else special
    real = np.arange(t)[None, :] < lengths[:, None]
    got = red.rows(feeds, lengths, sp, causal)
    assert [g for g, *_ in got] == groups
    worst = 0.0
    for g, values, valid, key_of in got:
        p = maps[g.site]
        want, want_ok = row_stats(p, lengths, sp, causal)
        for name in ROW_STATS:
            assert np.array_equal(valid[name], want_ok[name]), name
            ok = np.broadcast_to(valid[name][:, None, :], values[name].shape)
            a, b = values[name][ok], want[name][ok]
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=f"site {g.site} {name}")
            worst = max(worst, float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(b)), initial=0.0)))
            for r in range(t):  # the key every row would point an example at
                rows = np.full(p.shape[:2], r)
                assert np.array_equal(key_of(name, rows), _cols(name, p, rows, real, sp)), (g.site, name, r)
    return red, worst


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


def test_planted_encoder_padded_batch_equals_row_stats(tmp_path):
    red, specs = _planted_batch(tmp_path)
    feeds, lengths, special = red.feeds(specs[0])
    assert len(set(lengths.tolist())) > 1  # really padded
    _, worst = _compare(red.model, feeds, lengths, special, causal=False, in_graph_sites=[0, 1])
    assert worst < 1e-6


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


def test_causal_decoder_with_padding(tmp_path):
    path = tiny_text_model(tmp_path / "dec.onnx", layers=2, heads=2, causal=True, classifier=False)
    m = open_model(path, provider="cpu")
    rng = np.random.default_rng(1)
    ids = rng.integers(3, 8, (3, 9))
    lengths = np.array([9, 4, 6])
    special = np.zeros((3, 9), bool)
    special[:, 0] = True
    special[np.arange(3), lengths - 1] = True
    _compare(m, {m.inputs[0].name: ids}, lengths, special, causal=True, in_graph_sites=[0, 1])


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
    r, _ = _compare(red.model, feeds, lengths, special, causal=False, in_graph_sites=[0])
    assert r.exposed.outputs[1] in r.fetch  # layer 1's probabilities still come out


@pytest.mark.parametrize("arch", ["minilm", "gpt2"])
def test_real_exports_padded(hf_export, arch):
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
    _compare(m, f, lengths, special, causal, in_graph_sites=list(range(len(m.sites))))


def test_vision_transformer_cls_special(hf_export):
    path, feeds, _, _ = hf_export("vit", "legacy", "eager", 17)
    m = open_model(path, provider="cpu")
    px = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    t = 17  # 4×4 patches + CLS
    special = np.zeros((2, t), bool)
    special[:, 0] = True
    _compare(m, {"pixel_values": px}, np.full(2, t), special, causal=False, in_graph_sites=[0, 1])


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
