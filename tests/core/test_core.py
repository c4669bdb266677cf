import numpy as np
import pytest

from attnviz.core import AttentionResult, DenseMap, PatchGrid, SiteInfo, TokenAxis
from attnviz.core.io import load_npz, save_npz
from attnviz.core.reduce import aggregate_heads, drop_positions, keep_mass, rollout
from attnviz.core.stats import block_stats, head_stats


def softmax_maps(rng, b, h, tq, tk):
    x = rng.standard_normal((b, h, tq, tk)).astype(np.float32) * 2
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def enc_dec_result(rng):
    maps = [
        softmax_maps(rng, 1, 3, 5, 5),
        softmax_maps(rng, 1, 3, 5, 5),
        softmax_maps(rng, 1, 3, 4, 4),
        softmax_maps(rng, 1, 3, 4, 5),
    ]
    sites = [
        SiteInfo("encoder", "self", 0, 3, "a", "softmax"),
        SiteInfo("encoder", "self", 1, 3, "b", "softmax"),
        SiteInfo("decoder", "self", 0, 3, "c", "softmax"),
        SiteInfo("decoder", "cross", 0, 3, "d", "softmax"),
    ]
    return AttentionResult(
        [DenseMap(m) for m in maps],
        sites,
        tokens=TokenAxis(list("abcde"), [True, False, False, False, True]),
        key_tokens=TokenAxis(["<s>", "w", "x", "y"]),
        generated=["w", "x", "y", "</s>"],
        prompt_len=1,
    )


def test_blocks_group_and_label_axes():
    r = enc_dec_result(np.random.default_rng(0))
    blocks = r.blocks()
    assert [b.name for b in blocks] == ["encoder self-attention", "decoder self-attention", "decoder cross-attention"]
    enc, dec, cross = blocks
    assert enc.n_layers == 2 and enc.n_heads == 3 and enc.stacked().shape == (2, 3, 5, 5)
    assert cross.query_axis.labels == ["<s>", "w", "x", "y"] and cross.key_axis.labels == list("abcde")
    np.testing.assert_array_equal(cross.head(0, 2), r.maps[3].array()[0, 2])


def test_aggregates_and_rollout():
    rng = np.random.default_rng(1)
    m = softmax_maps(rng, 1, 4, 6, 6)[0]
    np.testing.assert_allclose(aggregate_heads(m, "mean"), m.mean(0))
    np.testing.assert_allclose(aggregate_heads(m, "max"), m.max(0))
    with pytest.raises(ValueError, match="unknown head aggregate"):
        aggregate_heads(m, "median")
    layers = softmax_maps(rng, 3, 4, 6, 6)  # [L, H, T, T]
    r = rollout(layers)
    np.testing.assert_allclose(r.sum(-1), 1.0, atol=1e-5)
    # by hand: product of (0.5 I + 0.5 A_l) from the first layer up
    want = np.eye(6)
    for a in layers:
        a = 0.5 * np.eye(6) + 0.5 * a.mean(0)
        want = (a / a.sum(-1, keepdims=True)) @ want
    np.testing.assert_allclose(r, want, atol=1e-5)
    # identity attention rolls out to the identity
    np.testing.assert_allclose(rollout(np.broadcast_to(np.eye(4), (2, 1, 4, 4))), np.eye(4), atol=1e-6)


def test_keep_mass_keeps_smallest_set_reaching_fraction():
    m = np.array([[0.5, 0.3, 0.15, 0.05]], np.float32)
    np.testing.assert_allclose(keep_mass(m, 0.5), [[0.5, 0, 0, 0]])
    np.testing.assert_allclose(keep_mass(m, 0.79), [[0.5, 0.3, 0, 0]])
    np.testing.assert_allclose(keep_mass(m, 0.9), [[0.5, 0.3, 0.15, 0]])
    np.testing.assert_allclose(keep_mass(m, 1.0), m)


def test_drop_positions_renormalises():
    m = np.full((3, 3), 1 / 3, np.float32)
    out = drop_positions(m, np.array([True, False, False]), np.array([True, False, False]))
    assert out.shape == (2, 2)
    np.testing.assert_allclose(out, 0.5)


def test_head_stats_on_known_patterns():
    t = 6
    prev = np.zeros((t, t), np.float32)
    prev[0, 0] = 1
    for i in range(1, t):
        prev[i, i - 1] = 1
    s = head_stats(prev)
    assert s["prev"] == pytest.approx(1.0) and s["entropy"] == pytest.approx(0.0)
    assert s["distance"] == pytest.approx((t - 1) / t)
    uniform = np.full((t, t), 1 / t, np.float32)
    s = head_stats(uniform, np.array([True] + [False] * (t - 1)))
    assert (
        s["entropy"] == pytest.approx(np.log2(t))
        and s["first"] == pytest.approx(1 / t)
        and s["special"] == pytest.approx(1 / t)
    )
    assert head_stats(np.eye(t, dtype=np.float32))["diag"] == pytest.approx(1.0)
    rows = block_stats(enc_dec_result(np.random.default_rng(0)).blocks()[0])
    assert len(rows) == 6 and {r["layer"] for r in rows} == {0, 1}


def test_patch_grid_inference():
    assert PatchGrid.infer(197) == PatchGrid(14, 14, 1)
    assert PatchGrid.infer(196) == PatchGrid(14, 14, 0)
    assert PatchGrid.infer(14 * 20 + 1, hint=(14, 20)) == PatchGrid(14, 20, 1)
    g = PatchGrid(2, 3, 1)
    np.testing.assert_array_equal(g.to_image(np.arange(7)), [[1, 2, 3], [4, 5, 6]])


def test_npz_round_trip(tmp_path):
    r = enc_dec_result(np.random.default_rng(2))
    r.patch_grid = PatchGrid(1, 5, 0)
    r.image = np.zeros((4, 4, 3), np.uint8)
    p = save_npz(r, tmp_path / "r.npz")
    back = load_npz(p)
    assert back.sites == r.sites and back.generated == r.generated and back.prompt_len == 1
    assert back.tokens.special == r.tokens.special and back.patch_grid == r.patch_grid
    for a, b in zip(back.maps, r.maps):
        np.testing.assert_array_equal(a.array(), b.array())
