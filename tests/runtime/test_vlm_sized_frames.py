"""One prompt's two images of different sizes (Qwen2-VL: each resized to its own size, a tower run each): the tower's
maps are kept as the images' own maps, frames of two sizes (:class:`attnviz.core.frames.FramesMap` with ``sizes``),
never the dense block-diagonal ``[ΣP, ΣP]``; what every reader shows is what the dense map gave (laid out here by
hand from each run's map, as the removed ``block_diagonal_each`` did): Image regions of each image with the tower's
attention, the token map, the thumbnails, the Head map's frame, the stats table, the figures, ``attnviz extract``'s
``.npz`` read back, and generation through the KV cache."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import vlm_build as vb  # noqa: E402

from attnviz.cli import main  # noqa: E402
from attnviz.core import io  # noqa: E402
from attnviz.core import view as v  # noqa: E402
from attnviz.core.attention import DenseMap  # noqa: E402
from attnviz.core.frames import FramesMap  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402

QWEN = "<|vision_start|><|image_pad|><|vision_end|>dog<|vision_start|><|image_pad|><|vision_end|>where the cat"
SIZES = [48, 60]  # 48 x 64 pixels: 6 x 8 patches; 48 x 80: 6 x 10
TOWER = 2  # the tower's sites, before the decoder's


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    d = tmp_path_factory.mktemp("sized")
    return [vb.random_image(d / "a.png", 45, 70, 3), vb.random_image(d / "wide.png", 60, 100, 5)]


@pytest.fixture(scope="module")
def model(qwen2vl_repo):
    return open_model(qwen2vl_repo, provider="cpu")


@pytest.fixture(scope="module")
def r(model, two):
    return model.analyze(text=QWEN, image=two)


def by_hand(m: FramesMap) -> np.ndarray:
    """``[1, H, ΣP, ΣP]``: each image's map on the diagonal, one after another, zeros elsewhere."""
    n = sum(m.sizes)
    out = np.zeros((1, m.shape[1], n, n), np.float32)
    at = 0
    for frame in m.frames(0):
        p = frame.shape[-1]
        out[0, :, at : at + p, at : at + p] = frame
        at += p
    return out


def dense(r):
    return replace(r, maps=[DenseMap(by_hand(m)) for m in r.maps[:TOWER]] + list(r.maps[TOWER:]))


def test_the_towers_maps_are_each_images_own(r):
    for m in r.maps[:TOWER]:
        assert isinstance(m, FramesMap) and m.sizes == SIZES and m.per_row == [2] and not m.uniform
        assert m.shape == (1, m.shape[1], 108, 108) and m.blocks.ndim == 1
        assert m.nbytes == m.shape[1] * (48 * 48 + 60 * 60) * 4  # not the dense 108² a head
    assert not any(isinstance(m, FramesMap) for m in r.maps[TOWER:])


@pytest.mark.parametrize("mode", v.MODES)
def test_image_regions_of_each_image_are_the_dense_paths(r, mode):
    want_r = dense(r)
    for picture in (0, 1):
        for query in (None, -1, 5, 48 + 17):
            sel = v.Selection(mode=mode, layer=1, head=2, image_from="tower", picture=picture, query=query)
            got, want = v.overlay_view(r, sel), v.overlay_view(want_r, sel)
            assert (got.query_label, got.peak, got.title) == (want.query_label, want.peak, want.title)
            np.testing.assert_allclose(got.patch, want.patch, rtol=0, atol=1e-6 if mode == "rollout" else 0)


def test_the_token_map_thumbnails_stats_and_figures_are_the_dense_paths(r):
    from frames_by_hand import per_frame_first_prev, per_frame_sink_share

    from attnviz.core.stats import block_stats
    from attnviz.figures import figure_bytes, render_figure

    want_r = dense(r)
    for sel in (v.Selection(layer=1, head=2), v.Selection(mode="max"), v.Selection(mode="rollout", keep=0.5)):
        np.testing.assert_allclose(v.compute_map(r, sel).matrix, v.compute_map(want_r, sel).matrix, atol=1e-6)
        got, want = v.thumbnails(r, sel, use_cache=False), v.thumbnails(want_r, sel, use_cache=False)
        assert got.keys() == want.keys() and all(np.allclose(got[k], want[k], atol=1e-6) for k in want)
    got, want = block_stats(r.blocks()[0]), block_stats(want_r.blocks()[0])
    for g, w in zip(got, want, strict=True):
        # "first" and "prev" are each image's own (core.stats.frames_head_stats), by hand from the laid-out head
        w["first"], w["prev"] = per_frame_first_prev(want_r.blocks()[0].head(w["layer"], w["head"]), [48, 60])
        w["sink_share"] = per_frame_sink_share(want_r.blocks()[0].head(w["layer"], w["head"]), [48, 60])
        assert g == pytest.approx(w, rel=1e-9, abs=1e-12)
    sel = v.Selection(layer=1, head=2, image_from="tower", picture=1)
    for view in ("overview", "image"):
        assert figure_bytes(render_figure(r, view, sel)) == figure_bytes(render_figure(want_r, view, sel)), view


def test_the_head_map_draws_each_image_alone(r, never_laid_out):
    want = v.compute_map(dense(r), v.Selection(mode="mean", layer_lo=0, layer_hi=1)).matrix
    assert v.tower_frames(r, v.Selection()) == ["image 1", "image 2"]
    for f, (o, p) in enumerate(((0, 48), (48, 60))):
        mv = v.head_map(r, v.Selection(mode="mean", layer_lo=0, layer_hi=1, frame=f))
        np.testing.assert_array_equal(mv.matrix, want[o : o + p, o : o + p])
        assert mv.k_labels[0] == f"img{f + 1}(0,0)" and mv.title.startswith(f"vision self-attention · image {f + 1}")


def test_reading_it_never_lays_the_frames_out(r, never_laid_out):
    from attnviz.core.stats import block_stats

    for picture in (0, 1):
        assert v.overlay_view(r, v.Selection(mode="mean", image_from="tower", picture=picture, query=-1)).peak
    assert v.thumbnails(r, v.Selection(), use_cache=False)
    assert len(block_stats(r.blocks()[0])) == 2 * r.maps[0].shape[1]


def test_extract_writes_the_frames_and_reads_them_back(model, two, r, tmp_path):
    out = tmp_path / "q.npz"
    args = ["extract", str(model.path), "--text", QWEN, "--image", two[0], "--image", two[1], "--out", str(out)]
    assert main(args) == 0
    with np.load(out) as z:
        assert z["attn_000_sizes"].tolist() == SIZES and z["attn_000"].ndim == 1
    back = io.load_npz(out)
    for got, want in zip(back.maps[:TOWER], r.maps[:TOWER], strict=True):
        assert isinstance(got, FramesMap) and got.sizes == SIZES
        np.testing.assert_allclose(got.blocks, want.blocks, atol=1e-6)
    sel = v.Selection(mode="mean", image_from="tower", picture=1, query=-1)
    got, want = v.overlay_view(back, sel), v.overlay_view(dense(r), sel)
    assert got.peak == want.peak
    np.testing.assert_allclose(got.patch, want.patch, atol=1e-6)


@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_keeps_the_frames(model, two, r, use_cache):
    g = model.analyze(text=QWEN, image=two, generate=3, use_cache=use_cache)
    for got, want in zip(g.maps[:TOWER], r.maps[:TOWER], strict=True):
        assert isinstance(got, FramesMap) and got.sizes == SIZES
        np.testing.assert_allclose(got.blocks, want.blocks, atol=1e-6)
