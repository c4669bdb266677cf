"""Image regions: grey image, colour image or heat only under the heat -- read back from the PNG's pixels and
compared with the blend computed by hand from the image's bytes and matplotlib's colour map."""

from __future__ import annotations

import io

import numpy as np
import pytest
from figure_data import vision_result
from matplotlib import colormaps
from PIL import Image

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.core import view as vm
from attnviz.core.io import save_npz
from attnviz.figures import FigureSpec, figure_bytes, render_spec
from attnviz.figures.recipe import load_recipe

RED = (slice(16, 40), slice(20, 48))  # the red rectangle of figure_data.test_image


def _png_and_axes(result, base: str):
    fig = render_spec(result, FigureSpec(view="image", query=0, head=1, dpi=200, width_in=3.0, image_base=base))
    png = np.asarray(Image.open(io.BytesIO(figure_bytes(fig, "png"))).convert("RGB"), np.float32) / 255.0
    return png, fig.axes[0]


def _pixel(png: np.ndarray, ax, y: int, x: int) -> np.ndarray:
    """The PNG pixel at the centre of image pixel (y, x) (matplotlib's display origin is bottom-left)."""
    dx, dy = ax.transData.transform((x, y))
    return png[png.shape[0] - 1 - int(dy), int(dx)]


def _heat_at(result, y: int, x: int) -> float:
    # (a FigureSpec without image_scale draws the stretched scale every image figure was drawn on before)
    sel = vm.Selection(mode="head", layer=1, head=1, query=0, scale="map")
    return float(vm.overlay_view(result, sel, result.image.shape[:2]).heat[y, x])


def test_colour_grey_and_heat_only_are_what_the_png_shows():
    result = vision_result()
    img = result.image.astype(np.float32) / 255.0
    # inside the red rectangle, away from its edges (no resampling of the base there), the least-attended pixel:
    # the heat is most transparent there, so the base shows most
    ys, xs = np.mgrid[RED[0].start + 3 : RED[0].stop - 3, RED[1].start + 3 : RED[1].stop - 3]
    heats = np.array([_heat_at(result, y, x) for y, x in zip(ys.ravel(), xs.ravel())])
    i = int(np.argmin(heats))
    y, x, heat = int(ys.ravel()[i]), int(xs.ravel()[i]), float(heats[i])
    magma = np.asarray(colormaps["magma"](heat)[:3])
    a = 0.2 + 0.7 * heat  # the documented opacity over an image
    lum = 0.299 * img[y, x, 0] + 0.587 * img[y, x, 1] + 0.114 * img[y, x, 2]
    want = {
        "colour": img[y, x] * (1 - a) + magma * a,
        "grey": (0.25 + 0.75 * lum) * (1 - a) + magma * a,
        "none": magma,  # opaque heat, no image at all
    }
    got = {}
    for base, expected in want.items():
        png, ax = _png_and_axes(result, base)
        got[base] = _pixel(png, ax, y, x)
        np.testing.assert_allclose(got[base], expected, atol=6 / 255, err_msg=base)
    # the settings differ where it matters: the red shows through in colour, not in grey
    assert got["colour"][0] - got["colour"][1] > 0.3
    assert abs(got["grey"][0] - got["grey"][1]) < 0.15
    # and the background of the heat-only figure does not depend on the image: a red and a green pixel alike
    png, ax = _png_and_axes(result, "none")
    for yy, xx in ((28, 34), (60, 2)):
        expected = np.asarray(colormaps["magma"](_heat_at(result, yy, xx))[:3])
        np.testing.assert_allclose(_pixel(png, ax, yy, xx), expected, atol=6 / 255)


def test_strip_panels_use_the_image_base():
    result = vision_result(decoder=True)
    grey = render_spec(result, FigureSpec(view="strip", dpi=40, image_base="grey"))
    colour = render_spec(result, FigureSpec(view="strip", dpi=40, image_base="colour"))
    g = np.asarray(grey.axes[1].images[0].get_array())
    c = np.asarray(colour.axes[1].images[0].get_array())
    assert np.allclose(g[..., 0], g[..., 1])  # grey: one value in every channel
    np.testing.assert_allclose(c, result.image / 255.0, atol=1e-6)  # colour: the image's own bytes


def test_unknown_image_base_is_one_message_naming_the_choices():
    with pytest.raises(AttnvizError, match="unknown image base 'sepia'; use one of grey, colour, none"):
        FigureSpec(view="image", image_base="sepia")
    with pytest.raises(vm.ViewError, match="unknown image base"):
        vm.overlay_view(vision_result(), vm.Selection(image_base="sepia"))


def test_cli_flag_reaches_the_recipe_and_the_recipe_redraws_it(tmp_path):
    maps = save_npz(vision_result(), tmp_path / "vit.npz")
    out = tmp_path / "colour.png"
    args = ["figure", "--maps", str(maps), "--view", "image", "--head", "1", "--dpi", "60"]
    assert main([*args, "--image-base", "colour", "--out", str(out)]) == 0
    assert load_recipe(f"{out}.recipe.json")["view"]["image_base"] == "colour"
    again = tmp_path / "again.png"
    assert main(["figure", "--recipe", f"{out}.recipe.json", "--out", str(again)]) == 0
    assert again.read_bytes() == out.read_bytes()
    grey = tmp_path / "grey.png"
    assert main([*args, "--out", str(grey)]) == 0
    assert grey.read_bytes() != out.read_bytes()


@pytest.mark.parametrize(
    ("demo", "sample", "base"),
    [("captioning", "captioning.png", "colour"), ("vit-classification", "vit-classification.png", "grey")],
)
def test_the_default_base_is_colour_under_a_captioners_words_and_grey_elsewhere(tmp_path, demo, sample, base):
    """ux29: the README said "grey image (default)" for Image regions, where a captioning model's words open on the
    colour image (they name its colours): both demos' figures without --image-base, as their recipes record it."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / f"{demo}.png"
    argv = ["figure", str(root / "models" / f"{demo}.onnx"), "--image", str(root / "resources" / "samples" / sample)]
    assert main([*argv, "--view", "image", "--dpi", "30", "--out", str(out)]) == 0
    assert load_recipe(f"{out}.recipe.json")["view"]["image_base"] == base
    readme = " ".join((root / "README.md").read_text(encoding="utf-8").split())
    assert "grey image (the default; colour image under a captioning model's words" in readme
