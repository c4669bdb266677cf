"""Image regions' colour scale (scale26): fixed 0–1, shared by the block's heads, or stretched to the map, linear or
log, the same for the window and `figure --view image`.

Independent checks: the shared scale's top is computed here with numpy from the maps `attnviz extract` wrote (each
head's query row over the image's patch keys, every layer); the heat on one scale is the heat on another times the
ratio of their tops (the same smoothed weights); the log heat is the fixed-scale heat's log10 over three decades;
a recipe redraws its figure's bytes, and a recipe written before the choice its stretched figure's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from attnviz.cli import main
from attnviz.core import view as vm
from attnviz.core.io import load_npz
from attnviz.figures.recipe import load_recipe

ROOT = Path(__file__).resolve().parents[2]
VIT = (ROOT / "models" / "vit-classification.onnx", ROOT / "resources" / "samples" / "vit-classification.png")
CAPTIONER = (ROOT / "models" / "captioning.onnx", ROOT / "resources" / "samples" / "captioning.png")


def _extract(tmp: Path, model: Path, image: Path, *extra: str) -> Path:
    out = tmp / f"{model.stem}.npz"
    assert main(["extract", str(model), "--image", str(image), *extra, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def vit(tmp_path_factory):
    return _extract(tmp_path_factory.mktemp("vit"), *VIT)


@pytest.fixture(scope="module")
def captioner(tmp_path_factory):
    return _extract(tmp_path_factory.mktemp("cap"), *CAPTIONER, "--generate", "8")


def _layers(npz: Path, keys: list[str]) -> list[np.ndarray]:
    with np.load(npz, allow_pickle=False) as z:
        return [z[k] for k in keys]


def test_vit_shared_top_is_the_largest_weight_any_head_gives_the_patches(vit):
    """The ViT demo: [CLS] (row 0) over the 8×8 patches (keys 1..64), two layers of four heads."""
    layers = _layers(vit, ["attn_000", "attn_001"])
    by_hand = max(float(m[0, h, 0, 1:65].max()) for m in layers for h in range(m.shape[1]))
    # "all patches (mean)": each head's mean of the patches' rows, then its largest weight on a patch
    mean_by_hand = max(float(m[0, h, 1:65, 1:65].mean(axis=0).max()) for m in layers for h in range(m.shape[1]))
    result = load_npz(vit)
    for mode in (dict(mode="head", layer=1, head=1), dict(mode="mean", layer_lo=0, layer_hi=1)):
        sel = vm.Selection(**mode, query=0, image_scale="shared")
        ov = vm.overlay_view(result, sel)
        assert ov.vmax == pytest.approx(by_hand, rel=1e-6) and ov.scale.vmin == 0.0
        assert vm.overlay_view(result, sel.with_(query=-1)).vmax == pytest.approx(mean_by_hand, rel=1e-6)
    # the case at hand: layer 1 head 1 barely looks at the image, another head stares at it
    own = float(layers[1][0, 1, 0, 1:65].max())
    assert own < by_hand / 5
    # log: three decades below the same top; fixed: 0–1 (linear) or 0.001–1
    log = vm.overlay_view(result, vm.Selection(mode="head", layer=1, head=1, query=0, image_scale="shared", log=True))
    assert (log.scale.vmin, log.scale.vmax) == pytest.approx((by_hand / 1000, by_hand), rel=1e-6)
    fixed = vm.overlay_view(result, vm.Selection(mode="head", layer=1, head=1, query=0, image_scale="fixed"))
    assert (fixed.scale.vmin, fixed.scale.vmax) == (0.0, 1.0)


def test_captioner_shared_top_over_the_words_cross_attention(captioner):
    result = load_npz(captioner)
    blocks = result.blocks()
    cross = next(b for b in blocks if b.kind == "cross")
    keys = [f"attn_{i:03d}" for i in cross.sites]
    layers = _layers(captioner, keys)
    bi = blocks.index(cross)
    for row in (1, 5):
        by_hand = max(float(m[0, h, row, :].max()) for m in layers for h in range(m.shape[1]))
        ov = vm.overlay_view(
            result, vm.Selection(block=bi, mode="head", layer=0, head=2, query=row, image_scale="shared")
        )
        assert ov.vmax == pytest.approx(by_hand, rel=1e-6)
        assert ov.scale.label == "attention weight (shared by the block's heads)"


def test_one_picture_on_three_scales_is_the_same_weights(vit):
    """The heat is the smoothed weights divided by the scale's top: two scales' heats differ by their tops' ratio
    (where neither is clipped), and the log heat is log10 of the weights over three decades below the top."""
    result = load_npz(vit)
    sel = vm.Selection(mode="head", layer=1, head=3, query=0)
    on = {s: vm.overlay_view(result, sel.with_(image_scale=s)) for s in vm.SCALES}
    fixed, shared, stretched = on["fixed"], on["shared"], on["map"]
    weights = fixed.heat  # on 0–1 the heat is the weights
    assert weights.max() < 1.0
    np.testing.assert_allclose(shared.heat * shared.vmax, weights, rtol=1e-5, atol=1e-7)
    free = stretched.heat < 0.999  # the stretched scale's top is sampled 8 times a cell: a pixel may pass it
    np.testing.assert_allclose(stretched.heat[free] * stretched.vmax, weights[free], rtol=1e-5, atol=1e-7)
    log = vm.overlay_view(result, sel.with_(image_scale="fixed", log=True))
    by_hand = np.clip((np.log10(np.maximum(weights, 1e-3)) + 3.0) / 3.0, 0.0, 1.0)
    np.testing.assert_allclose(log.heat, by_hand, atol=1e-6)
    # the opacity follows the heat on every scale, and the colour bar's words name the scale
    np.testing.assert_allclose(log.alpha, 0.2 + 0.7 * log.heat, atol=1e-6)
    own = ("fixed", "shared", "map")
    assert [on[s].scale.label for s in own] == [f"attention weight ({vm.SCALES[s]})" for s in own]
    # an overlay is one query's row: the row scale stretches it to its own peak, as "map" does, and says that
    assert on["row"].scale.label == stretched.scale.label
    np.testing.assert_array_equal(on["row"].heat, stretched.heat)
    assert log.scale.label == "attention weight (log scale, fixed 0–1)"


def test_several_heads_side_by_side_share_one_scale(vit):
    result = load_npz(vit)
    sel = vm.Selection(mode="head", layer=1, head=0, heads=(3, 0, 1), query=0, image_scale="shared")
    ho = vm.heads_overlay(result, sel)
    assert [ov.title.split(" · ")[2] for ov in ho.overlays] == ["head 0", "head 1", "head 3"]
    assert ho.captions == ["head 0", "head 1", "head 3"]
    assert "layer 1 · heads 0, 1, 3 · query" in ho.title
    assert len({ov.vmax for ov in ho.overlays}) == 1
    with pytest.raises(vm.ViewError, match="stretched scale .* give --scale shared") as e:
        vm.heads_overlay(result, sel.with_(image_scale="map"))
    assert e.value.param == "scale"


def test_the_figure_draws_the_scale_asked_and_its_recipe_redraws_it(tmp_path, vit):
    args = ["figure", "--maps", str(vit), "--view", "image", "--layer", "1", "--dpi", "50"]
    out = tmp_path / "shared.png"
    assert main([*args, "--head", "0,1,3", "--scale", "shared", "--log", "--out", str(out)]) == 0
    view = load_recipe(f"{out}.recipe.json")["view"]
    assert (view["image_scale"], view["log"], view["heads"]) == ("shared", True, [0, 1, 3])
    again = tmp_path / "again.png"
    assert main(["figure", "--recipe", f"{out}.recipe.json", "--out", str(again)]) == 0
    assert again.read_bytes() == out.read_bytes()
    # a new figure without --scale: the window's default over an image (stretched), recorded
    plain = tmp_path / "plain.png"
    assert main([*args, "--head", "1", "--out", str(plain)]) == 0
    assert load_recipe(f"{plain}.recipe.json")["view"]["image_scale"] == vm.IMAGE_DEFAULT_SCALE
    # a recipe written before the choice (no image_scale; its scale and log were not read): the stretched figure
    old = json.loads(Path(f"{plain}.recipe.json").read_text())
    del old["view"]["image_scale"]
    old["view"]["log"] = True
    old_recipe = tmp_path / "old.png.recipe.json"
    old_recipe.write_text(json.dumps(old))
    redrawn, stretched = tmp_path / "redrawn.png", tmp_path / "stretched.png"
    assert main(["figure", "--recipe", str(old_recipe), "--out", str(redrawn)]) == 0
    assert main([*args, "--head", "1", "--scale", "map", "--out", str(stretched)]) == 0
    fixed = tmp_path / "fixed.png"
    assert main([*args, "--head", "1", "--scale", "fixed", "--out", str(fixed)]) == 0
    assert redrawn.read_bytes() == stretched.read_bytes() != fixed.read_bytes()


def test_several_heads_on_the_stretched_scale_is_one_line(tmp_path, vit, capsys):
    out = tmp_path / "x.pdf"
    args = ["figure", "--maps", str(vit), "--view", "image", "--head", "0,1", "--scale", "map", "--out", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--scale shared" in err and "Traceback" not in err
    assert not out.exists()


def test_a_nan_weight_is_no_top_of_the_shared_scale():
    """A NaN in the first head read (an export's fused kernel gone wrong) left Python's max() order-dependent: the
    shared top is numpy's nanmax over the heads' rows, by hand; every weight NaN: the scale's floor, drawn blank."""
    from figure_data import vision_result

    r = vision_result()
    r.maps[0].array()[0, 0, 0, 1] = np.nan
    grid = r.patch_grid
    by_hand = max(float(np.nanmax(m.array()[0, h, 0, grid.offset : grid.end])) for m in r.maps for h in range(2))
    ov = vm.overlay_view(r, vm.Selection(mode="head", layer=1, head=0, query=0, image_scale="shared"))
    assert ov.vmax == pytest.approx(by_hand, rel=1e-6) and not np.isnan(ov.heat).any()
    r = vision_result()  # (a result's maps are read once for its shared tops: a new one)
    for m in r.maps:
        m.array()[:] = np.nan
    assert vm.overlay_view(r, vm.Selection(mode="head", layer=1, head=0, query=0, image_scale="shared")).vmax == 1e-6


@pytest.mark.parametrize("log", [False, True])
def test_vmax_sets_the_image_views_colour_limits(vit, log):
    """`figure --view image --vmax V` draws on 0..V (log: V/1000..V), as the token maps take --vmax: the colour
    bar's limits are V's, and the heat is the weights over V (clipped at V), checked against the fixed-scale heat
    (the weights themselves).  It was ignored: the bar and the heat stayed on the selection's scale."""
    from matplotlib.colors import LogNorm

    from attnviz.figures import FigureSpec, render_spec

    result = load_npz(vit)
    top = 0.05
    spec = FigureSpec(view="image", layer=1, head=3, query=0, dpi=40, vmax=top, log=log, image_scale="fixed")
    fig = render_spec(result, spec)
    bars = [ax for ax in fig.axes if getattr(ax, "_colorbar", None) is not None]
    assert len(bars) == 1
    norm = bars[0]._colorbar.norm
    assert (norm.vmin, norm.vmax) == pytest.approx((top / 1000, top) if log else (0.0, top))
    assert isinstance(norm, LogNorm) == log
    label = bars[0].get_ylabel().replace("\n", " ")
    assert "top 0.05 set by hand" in label and "fixed 0–1" not in label
    sel = vm.Selection(mode="head", layer=1, head=3, query=0, image_scale="fixed", log=log)
    weights = vm.overlay_view(result, sel.with_(log=False)).heat  # on fixed 0–1 the heat is the weights
    assert weights.max() > top  # some of the map lies above V: the clip is exercised
    drawn = vm.overlay_view(result, sel.with_(vmax=top))
    if log:
        by_hand = np.clip((np.log10(np.maximum(weights, top / 1000)) - np.log10(top / 1000)) / 3.0, 0.0, 1.0)
    else:
        by_hand = np.clip(weights / top, 0.0, 1.0)
    np.testing.assert_allclose(drawn.heat, by_hand, atol=1e-5)
    # several heads on the stretched scale are refused (each its own top), but with --vmax they share V
    ho = vm.heads_overlay(result, sel.with_(heads=(0, 3), image_scale="map", vmax=top))
    assert {ov.scale.vmax for ov in ho.overlays} == {top}
