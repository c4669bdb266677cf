"""A figure of a prompt that held several images, made from the model (``figure MODEL --image A --image B``): its
recipe keeps every image file (each with its sha256, in order) and the image drawn, and draws the same bytes again;
an image changed since is one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("torch")
pytest.importorskip("transformers")

PROMPT = "<|vision_start|><|image_pad|><|vision_end|><|vision_start|><|image_pad|><|vision_end|>where the cat"


def test_the_recipe_keeps_every_image_and_draws_the_same_again(qwen2vl_repo, tmp_path, capsys):
    from attnviz.cli import main

    images = []
    for name, seed in (("a.png", 3), ("b.png", 4)):
        Image.fromarray((np.random.default_rng(seed).random((45, 70, 3)) * 255).astype(np.uint8)).save(tmp_path / name)
        images.append(str(tmp_path / name))
    out = tmp_path / "f.png"
    args = ["figure", str(qwen2vl_repo), "--image", images[0], "--image", images[1], "--text", PROMPT]
    assert main([*args, "--view", "image", "--picture", "2", "--layer", "1", "--head", "0", "--out", str(out)]) == 0
    recipe = tmp_path / "f.png.recipe.json"
    r = json.loads(recipe.read_text())
    assert r["inputs"]["image"] is None and [e["path"] for e in r["inputs"]["images"]] == ["a.png", "b.png"]
    assert r["view"]["picture"] == 2
    again = tmp_path / "g.png"
    assert main(["figure", "--recipe", str(recipe), "--out", str(again)]) == 0
    assert again.read_bytes() == out.read_bytes()
    Image.fromarray(np.zeros((45, 70, 3), np.uint8)).save(images[1])  # the second image changed since
    capsys.readouterr()
    assert main(["figure", "--recipe", str(recipe), "--out", str(tmp_path / "h.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "b.png has changed since the recipe was written" in err[0]


def test_the_vision_blocks_figure_names_its_image(qwen2vl_repo, tmp_path):
    """figure --view image --block 0 --picture 2: the vision tower's self-attention over image 2's own patches (its
    grid, its picture), the title naming the block and the image; image 1 on its own grid."""
    from attnviz.core import view as v
    from attnviz.figures import FigureSpec, render_spec
    from attnviz.runtime import open_model

    images = []
    for name, seed, (h, w) in (("a.png", 3, (45, 70)), ("b.png", 4, (60, 100))):
        Image.fromarray((np.random.default_rng(seed).random((h, w, 3)) * 255).astype(np.uint8)).save(tmp_path / name)
        images.append(str(tmp_path / name))
    r = open_model(qwen2vl_repo, provider="cpu").analyze(text=PROMPT, image=images)
    for picture, (rows, cols) in ((1, (6, 8)), (2, (6, 10))):
        spec = FigureSpec(view="image", block=0, layer=1, picture=picture, dpi=40)
        fig = render_spec(r, spec)
        from matplotlib.text import Text

        titles = " ".join(t.get_text() for t in fig.findobj(Text))
        assert "vision self-attention" in titles and f"image {picture} of 2" in titles
        ov = v.overlay_view(r, v.Selection(block=0, layer=1, picture=picture - 1, mode="mean"))
        assert (ov.grid.rows, ov.grid.cols) == (rows, cols)
        assert ov.heat.shape[:2] == r.images[picture - 1].shape[:2]  # drawn over that image
