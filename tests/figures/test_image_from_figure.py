"""``attnviz figure --view image --image-from tower``: the vision tower's own attention over image N of a prompt that
held two (the window's chooser, on the command line): its layer and head checked against the tower, the drawn heat
that of the mean of image N's patches' rows placed on its grid by hand from the keys' labels, the choice kept in the
recipe (which draws the same bytes again); a recipe without it is the words', as before there was a choice."""

from __future__ import annotations

import json

import numpy as np
import pytest
import vlm_build

pytest.importorskip("torch")
pytest.importorskip("transformers")

PROMPT = "<|vision_start|><|image_pad|><|vision_end|>dog<|vision_start|><|image_pad|><|vision_end|>where the cat"


def placed(labels: list[str], row: np.ndarray, image: int) -> np.ndarray:
    return vlm_build.on_grid(labels, row, rf"img{image}\((\d+),(\d+)\)")


def test_the_towers_figure_draws_its_grid_and_its_recipe_keeps_the_choice(qwen2vl_repo, tmp_path, capsys):
    from attnviz.cli import main
    from attnviz.core import view as vm
    from attnviz.figures import FigureSpec, render_spec
    from attnviz.runtime import open_model

    images = vlm_build.two_random_images(tmp_path)
    r = open_model(qwen2vl_repo, provider="cpu").analyze(text=PROMPT, image=images)
    tower = [i for i, s in enumerate(r.sites) if s.stack == "encoder"]
    labels = list(r.blocks()[0].key_axis.labels)
    mine = [k for k, lab in enumerate(labels) if lab.startswith("img2(")]
    want = placed(labels, r.maps[tower[1]].array()[0, 2][mine].mean(axis=0), 2)
    fig = render_spec(r, FigureSpec(view="image", image_from="tower", layer=1, head=2, picture=2, dpi=40))
    assert fig.attnviz_selection.block == 0 and fig.attnviz_selection.image_from == "tower"
    rgba = np.asarray(next(a for a in fig.axes if len(a.images) == 2).images[1].get_array())
    top = float(vm.upsample(want, (8 * 6, 8 * 10)).max())
    alpha = vm.overlay_alpha(np.clip(vm.upsample(want, rgba.shape[:2]) / top, 0, 1), "grey")
    np.testing.assert_allclose(rgba[..., 3], alpha, atol=1e-6)
    # without the choice: the words' attention over image 2 (the decoder's block), as before
    words = render_spec(r, FigureSpec(view="image", layer=1, head=2, picture=2, dpi=40))
    assert r.blocks()[words.attnviz_selection.block].stack == "decoder"

    args = ["figure", str(qwen2vl_repo), "--image", images[0], "--image", images[1], "--text", PROMPT]
    out = tmp_path / "f.png"
    view = ["--view", "image", "--image-from", "tower", "--picture", "2", "--layer", "1", "--head", "2"]
    assert main([*args, *view, "--out", str(out)]) == 0
    recipe = tmp_path / "f.png.recipe.json"
    assert json.loads(recipe.read_text())["view"]["image_from"] == "tower"
    again = tmp_path / "g.png"
    assert main(["figure", "--recipe", str(recipe), "--out", str(again)]) == 0
    assert again.read_bytes() == out.read_bytes()
    # the tower has 2 layers, 4 heads: --head 4 is named against it
    capsys.readouterr()
    assert main([*args, "--view", "image", "--image-from", "tower", "--head", "4", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["attnviz: error: head 4 is out of range; vision self-attention layer 1 has heads 0..3 (see --head)"]
    # no --image-from: the recipe says nothing of it
    assert main([*args, "--view", "image", "--out", str(tmp_path / "h.png")]) == 0
    assert "image_from" not in json.loads((tmp_path / "h.png.recipe.json").read_text())["view"]
