"""An Idefics3 / SmolVLM tower's several frames (the processor's tiles and its global image) are kept as the frames'
own maps (:class:`attnviz.core.frames.FramesMap`), whether the vision file is opened alone or in the whole model:
the block-diagonal map over every frame's patches (the frame count times larger: 8.5 GB a layer for SmolVLM's 13
frames of 1,024 patches) is never made, and everything the user sees is what the dense block-diagonal map gave
(the maps laid out here with the runtime's own block_diagonal, as the dense path made them): the Image regions
view of each tile beside the global image, its peaks and labels, the token map, the thumbnails, the figures, and
the ``.npz`` that ``attnviz extract`` writes and the window opens again."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import idefics3_models as im  # noqa: E402
from PIL import Image  # noqa: E402

from attnviz.cli import main  # noqa: E402
from attnviz.core import io  # noqa: E402
from attnviz.core import view as v  # noqa: E402
from attnviz.core.attention import DenseMap  # noqa: E402
from attnviz.core.frames import FramesMap  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402
from attnviz.runtime.vlm_families import block_diagonal  # noqa: E402

PROMPT = "<s> <image> a photo of the cat"
P = 36  # a 48-pixel tile's 6 x 6 patches


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("img")
    out = {}
    for name, hw in {"square": (70, 64), "wide": (40, 100)}.items():
        Image.fromarray((np.random.default_rng(3).random((*hw, 3)) * 255).astype(np.uint8)).save(d / f"{name}.png")
        out[name] = d / f"{name}.png"
    return out


@pytest.fixture(scope="module")
def tower(idefics3_repo):
    return open_model(idefics3_repo / "onnx" / "vision_encoder.onnx", provider="cpu")


@pytest.fixture(scope="module")
def square(tower, images):
    return tower.analyze(image=str(images["square"]))


def dense(r, n=None):
    """The result as the dense path made it: each frames' map laid out by block_diagonal (the first ``n`` maps,
    the tower's, where the decoder's follow)."""
    n = len(r.maps) if n is None else n
    laid = [DenseMap(block_diagonal(m.blocks, m.per_row)) for m in r.maps[:n]]
    return replace(r, maps=laid + list(r.maps[n:]))


def test_the_towers_maps_are_its_frames_maps(square, torch_model, idefics3_repo, images):
    """Kept as transformers' vision model's maps, one per frame (5: 4 tiles and the global image), not laid out."""
    proc = im.processor(idefics3_repo)
    enc = proc(text=[PROMPT], images=[[Image.open(images["square"]).convert("RGB")]], return_tensors="np")
    vision, _, _ = im.reference(torch_model, enc)
    for m, want in zip(square.maps, vision, strict=True):
        assert isinstance(m, FramesMap) and m.per_row == [5] and m.shape == (1, im.HEADS, 5 * P, 5 * P)
        assert m.blocks.shape == (5, im.HEADS, P, P) and m.nbytes == want.nbytes
        np.testing.assert_allclose(m.blocks, want, atol=5e-4)


@pytest.fixture(scope="module")
def torch_model():
    return im.build()


QUERIES = [None, -1, 0, 40, 4 * P + 7]  # the default, every patch's mean, tile 0's and tile 1's, the global image's


@pytest.mark.parametrize("mode", v.MODES)
def test_image_regions_peaks_and_labels_are_the_dense_paths(square, mode):
    want_r = dense(square)
    for layer in range(im.LAYERS):
        for query in QUERIES:
            sel = v.Selection(mode=mode, layer=layer, head=1, query=query, layer_lo=0, layer_hi=layer)
            got, want = v.overlay_view(square, sel), v.overlay_view(want_r, sel)
            assert (got.query_label, got.peak, got.title, got.captions) == (
                want.query_label,
                want.peak,
                want.title,
                want.captions,
            )
            np.testing.assert_allclose(got.patch, want.patch, rtol=0, atol=1e-6 if mode == "rollout" else 0)
            np.testing.assert_allclose(got.global_panel.patch, want.global_panel.patch, atol=1e-6)
    assert v.overlay_view(square, v.Selection(query=40)).query_label == "tile 1 patch (0, 4)"
    assert v.overlay_view(square, v.Selection(query=4 * P + 7)).query_label == "global image patch (1, 1)"


def test_the_token_map_thumbnails_and_figures_are_the_dense_paths(square):
    """The tower block's token map (compute_map) is the whole block-diagonal map (off the diagonal blocks, zeros), as
    the whole model's tower block draws it; its figures' bytes are the dense path's, but the heatmap's: the Head map
    draws one frame (tests/gui/test_head_map_frames.py)."""
    from attnviz.figures import figure_bytes, render_figure

    want_r = dense(square)
    for sel in (v.Selection(layer=1, head=2), v.Selection(mode="max"), v.Selection(hide_special=True, keep=0.5)):
        np.testing.assert_array_equal(v.compute_map(square, sel).matrix, v.compute_map(want_r, sel).matrix)
        got, want = v.thumbnails(square, sel, use_cache=False), v.thumbnails(want_r, sel, use_cache=False)
        assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in want)
    sel = v.Selection(layer=1, head=2, query=40)
    for view in ("overview", "image"):
        assert figure_bytes(render_figure(square, view, sel)) == figure_bytes(render_figure(want_r, view, sel)), view
    # the heatmap figure draws the Head map's: the query's frame alone (tile 1), the dense map's diagonal block
    fig = render_figure(square, "heatmap", sel)
    drawn = next(a for a in fig.axes if a.images).images[0].get_array()
    np.testing.assert_array_equal(drawn, v.compute_map(want_r, sel).matrix[P : 2 * P, P : 2 * P])
    assert "tile 1 (row 0, col 1)" in next(a for a in fig.axes if a.get_title()).get_title()


def test_image_regions_the_overview_and_the_stats_table_never_lay_the_frames_out(square, never_laid_out):
    """Drawing Image regions (every query, every mode, its figure), the overview (thumbnails, its figure) and the
    stats table reads the frames' blocks (one row's block, the blocks' rows, each frame's pooled map), never the whole map
    (17 frames of 1,024 patches: 1.2 GB).  The values are the dense path's (the tests above, and
    tests/core/test_frames_map.py for the stats)."""
    from attnviz.core.stats import block_stats
    from attnviz.figures import render_figure

    for mode in v.MODES:
        for query in QUERIES:
            assert v.overlay_view(square, v.Selection(mode=mode, query=query, layer_lo=0, layer_hi=1)).peak
    render_figure(square, "image", v.Selection(mode="mean", query=40))
    assert v.thumbnails(square, v.Selection(), use_cache=False)
    render_figure(square, "overview", v.Selection())  # its notes without the mean map (map_notes)
    assert len(block_stats(square.blocks()[0])) == im.LAYERS * im.HEADS
    with pytest.raises(AssertionError, match="was laid out"):  # the token map still lays the whole block out
        v.compute_map(square, v.Selection(mode="mean"))


def test_a_comparison_draws_the_selected_frame_of_both(tower, images, square, tmp_path, never_laid_out):
    """File ▸ Compare with… on a tower: B's map and A − B are of the frame the Head map shows, each the dense
    block-diagonal map's block (B: the same tower on another picture of the same split), never laid out whole."""
    other = tmp_path / "other.png"
    Image.fromarray((np.random.default_rng(9).random((70, 64, 3)) * 255).astype(np.uint8)).save(other)
    b = tower.analyze(image=str(other))
    assert b.maps[0].per_row == [5]
    want_a, want_b = dense(square), dense(b)
    for frame in (1, 4):
        for sel in (v.Selection(layer=1, head=2, frame=frame), v.Selection(mode="rollout", frame=frame)):
            cut = slice(frame * P, (frame + 1) * P)
            block_a, block_b = (v.compute_map(r, sel).matrix[cut, cut] for r in (want_a, want_b))
            np.testing.assert_allclose(v.compute_other_map(square, b, sel).matrix, block_b, atol=1e-6)
            diff = v.compute_diff_map(square, b, sel)
            np.testing.assert_allclose(diff.matrix, block_a - block_b, atol=1e-6)
            assert diff.diverging and ("tile 1" if frame == 1 else "global image") in diff.title


def test_the_stats_tables_rows_frame_by_frame_are_the_dense_paths(square):
    pytest.importorskip("PySide6")
    from frames_by_hand import per_frame_first_prev, per_frame_sink_share

    from attnviz.gui.views.stats_table import compute_stats

    blk, want_blk = square.blocks()[0], dense(square).blocks()[0]
    got, want = compute_stats(square, blk, -1), compute_stats(dense(square), want_blk, -1)
    assert [(r["layer"], r["head"]) for r in got] == [(r["layer"], r["head"]) for r in want]
    for g, w in zip(got, want, strict=True):
        # "first" and "prev" are each frame's own (core.stats.frames_head_stats), by hand from the laid-out head
        w["first"], w["prev"] = per_frame_first_prev(want_blk.head(w["layer"], w["head"]), [P] * 5)
        w["sink_share"] = per_frame_sink_share(want_blk.head(w["layer"], w["head"]), [P] * 5)
        assert g == pytest.approx(w, rel=1e-9, abs=1e-12)


def test_extract_writes_the_frames_maps_and_the_window_opens_them_again(tower, images, square, tmp_path):
    out = tmp_path / "t.npz"
    assert main(["extract", str(tower.path), "--image", str(images["square"]), "--out", str(out)]) == 0
    with np.load(out) as z:
        assert z["attn_000"].shape == (5, im.HEADS, P, P) and z["attn_000_frames"].tolist() == [5]
    back = io.load_npz(out)
    assert all(isinstance(m, FramesMap) for m in back.maps) and back.patch_grid == square.patch_grid
    for m, want in zip(back.maps, square.maps, strict=True):
        np.testing.assert_allclose(m.blocks, want.blocks, atol=1e-6)
    for query in QUERIES:
        sel = v.Selection(mode="mean", query=query)
        got, want = v.overlay_view(back, sel), v.overlay_view(dense(square), sel)
        assert (got.query_label, got.peak) == (want.query_label, want.peak)
        np.testing.assert_allclose(got.patch, want.patch, atol=1e-6)


def test_extracts_size_limit_counts_the_frames_own_maps(tower, images, square, tmp_path, monkeypatch, capsys):
    """``output_mb`` counts what is written, the frames' maps (2 layers x 5 frames x 4 heads x 36² float32: 0.2 MB),
    not the dense block-diagonal map (180²: 1.0 MB); a refusal says so, in one line."""
    from attnviz.core import limits

    out = tmp_path / "t.npz"
    monkeypatch.setenv("ATTNVIZ_MAX_OUTPUT_MB", "1")  # the frames fit, the dense maps would not
    assert main(["extract", str(tower.path), "--image", str(images["square"]), "--out", str(out)]) == 0
    assert sum(io.written_bytes(m) for m in square.maps) == im.LAYERS * 5 * im.HEADS * P * P * 4
    monkeypatch.delenv("ATTNVIZ_MAX_OUTPUT_MB")
    monkeypatch.setitem(limits.LIMITS, "output_mb", limits.Limit(0, "MB", "use a shorter input or fewer layers"))
    capsys.readouterr()
    assert main(["extract", str(tower.path), "--image", str(images["square"]), "--out", str(tmp_path / "x.npz")]) == 2
    err = capsys.readouterr().err.strip()
    assert "the maps for x.npz (a vision tower's 5 frames counted as their own maps" in err and "0.2 MB" in err
    assert "\n" not in err and not (tmp_path / "x.npz").exists()


def test_a_padded_batchs_rows_are_their_own_frames(tower, idefics3_repo, images):
    """Two images of 3 and 5 frames as one run: each row's frames, the shorter row's padding all zero, the same
    maps and views as the dense path."""
    pics = [Image.open(images[k]).convert("RGB") for k in ("wide", "square")]
    enc = im.processor(idefics3_repo)(
        text=["<image> a cat", "red <image> dog"], images=[[p] for p in pics], return_tensors="np", padding=True
    )
    r = tower.analyze(feeds={"pixel_values": enc["pixel_values"]})
    assert all(isinstance(m, FramesMap) and m.per_row == [3, 5] for m in r.maps)
    want_r = dense(r)
    for b in (0, 1):
        for mode in ("head", "mean", "rollout"):
            sel = v.Selection(mode=mode, batch=b, layer=1, head=3, query=-1)
            got, want = v.overlay_view(r, sel), v.overlay_view(want_r, sel)
            assert got.peak == want.peak
            np.testing.assert_allclose(got.patch, want.patch, atol=1e-6)
            np.testing.assert_allclose(v.compute_map(r, sel).matrix, v.compute_map(want_r, sel).matrix, atol=1e-6)
    # the Head map: each row's own frames (row 0's 2 tiles and global image, never its padding), each its block
    assert [len(v.tower_frames(r, v.Selection(batch=b))) for b in (0, 1)] == [3, 5]
    assert v.tower_frames(r, v.Selection(batch=0))[-1] == "global image"
    for b, frame in ((0, 2), (0, 9), (1, 3)):
        sel = v.Selection(mode="mean", batch=b, frame=frame)
        f = min(frame, 2 if b == 0 else 4)  # a frame past the row's: its last
        cut = slice(f * P, (f + 1) * P)
        np.testing.assert_array_equal(v.head_map(r, sel).matrix, v.compute_map(want_r, sel).matrix[cut, cut])


def test_the_whole_models_tower_block_is_the_frames_maps(idefics3_repo, images, square):
    whole = open_model(idefics3_repo, provider="cpu")
    full = whole.analyze(text=PROMPT, image=str(images["square"]))
    n = len(square.maps)
    for got, want in zip(full.maps[:n], square.maps, strict=True):
        assert isinstance(got, FramesMap) and got.per_row == [5]
        np.testing.assert_allclose(got.blocks, want.blocks, atol=1e-6)
    sel = v.Selection(mode="mean", image_from="tower", query=40)
    got, want = v.overlay_view(full, sel), v.overlay_view(dense(full, n), sel)
    assert (got.query_label, got.peak) == (want.query_label, want.peak)
    np.testing.assert_array_equal(got.patch, want.patch)


@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_keeps_the_towers_frames(idefics3_repo, images, square, use_cache):
    """The whole model generating (through the KV cache, or re-run on the whole sequence): the tower's sites are
    still the frames' maps, the tower alone's on the same image."""
    whole = open_model(idefics3_repo, provider="cpu")
    r = whole.analyze(text=PROMPT, image=str(images["square"]), generate=3, use_cache=use_cache)
    assert len(r.generated) == 3
    for got, want in zip(r.maps[: len(square.maps)], square.maps, strict=True):
        assert isinstance(got, FramesMap) and got.per_row == [5]
        np.testing.assert_allclose(got.blocks, want.blocks, atol=1e-6)
