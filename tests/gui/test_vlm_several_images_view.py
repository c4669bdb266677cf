"""Several images in one prompt on screen and in the figure: the tiny Qwen2-VL opened in the real window with two
images (the image box's ``a.png; b.png``, as the file dialog writes several files).  Image regions offers one entry
per image; for each image chosen, each word after that image's tokens shows its row of the decoder's
self-attention over that image's tokens, placed by hand from their labels (``img1(r,c)`` / ``img2(r,c)``), drawn
over that image; the other image's tokens are no word to ask about; the exported figure draws the same and names
the image; a figure of an image the prompt did not hold is one line."""

from __future__ import annotations

import numpy as np
import pytest
import vlm_build
from gui_helpers import open_and_wait
from screen_figure import check_image, figure

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
pytest.importorskip("transformers")

PROMPT = "<|vision_start|><|image_pad|><|vision_end|>dog<|vision_start|><|image_pad|><|vision_end|>where the cat"


def placed_by_hand(keys: list[str], row: np.ndarray, image: int) -> np.ndarray:
    """Image ``image``'s tokens where their labels put them: ``img{image}(r,c)`` at (r, c)."""
    return vlm_build.on_grid(keys, row, rf"img{image}\((\d+),(\d+)\)")


@pytest.fixture
def two_images(tmp_path):
    return vlm_build.two_random_images(tmp_path)  # 3 x 4 and 3 x 5 image tokens


def test_each_image_of_the_prompt_shows_its_words_rows_on_screen_and_in_the_figure(
    qtbot, real_window, qwen2vl_repo, two_images
):
    w = real_window
    open_and_wait(qtbot, w, qwen2vl_repo, text=PROMPT, image=two_images)
    assert w.inputs.image.text() == "; ".join(two_images)
    r = w.session.result
    assert len(r.images) == 2
    from attnviz.core.token_counts import token_rows

    # the Run sidebar counts both images' tokens (3 × 4 and 3 × 5), and the words apart; the vision tower's
    # patches of both (6 × 8 and 6 × 10)
    n_words = len(r.key_tokens) - 27
    assert token_rows(r) == [
        ("text tokens", f"{n_words} in the decoder"),
        ("image tokens", "27 in the decoder (2 images: 3×4, 3×5) · 108 tokens in the vision tower"),
    ]
    w.select_view("image")
    v = w.image_regions
    box = v.picture_box
    assert box.isVisible() and [box.itemText(i) for i in range(box.count())] == ["image 1 of 2", "image 2 of 2"]
    decoder = [i for i, s in enumerate(r.sites) if (s.stack, s.kind) == ("decoder", "self")]
    w.session.select(mode="head", layer=1, head=2, layer_lo=1, layer_hi=1)
    for picture in (1, 0):
        box.setCurrentIndex(picture)  # as a user picks it
        assert w.session.sel.picture == picture
        bi, grid, kind = v.source()
        keys = list(w.session.blocks[bi].key_axis.labels)
        mine = [k for k, label in enumerate(keys) if label.startswith(f"img{picture + 1}(")]
        assert (grid.offset, grid.n) == (mine[0], len(mine))  # this image's run of tokens
        words = [keys[row] for _, row in v.queries]
        assert not any(x.startswith("img") for x in words)  # the other image's tokens are no word
        assert words[-3:] == ["where", "the", "cat"] and ("dog" in words) == (picture == 0)
        assert np.array_equal(v.base_image(grid), r.images[picture])  # drawn over this image
        assert (grid.rows, grid.cols) == [(3, 4), (3, 5)][picture] and v._image_size == r.images[picture].shape[:2]
        for i, (_, row) in enumerate(v.queries):
            v.set_query(i)
            want = placed_by_hand(keys, r.maps[decoder[1]].array()[0, 2, row], picture + 1)
            np.testing.assert_allclose(v.patch_map, want, rtol=1e-5, atol=1e-8)
            assert f"image {picture + 1} of 2" in v.info.text()
        fig = figure(w, v)
        check_image(w, fig)  # the figure: the same image, heat, colours and query word
        assert f"image {picture + 1} of 2" in " ".join(t.get_text().replace("\n", " ") for t in fig.texts)


def test_a_figure_of_an_image_the_prompt_did_not_hold_is_one_line(qwen2vl_repo, two_images, tmp_path, capsys):
    from attnviz.cli import main

    maps = tmp_path / "m.npz"
    assert main(["extract", str(qwen2vl_repo), *sum((["--image", p] for p in two_images), []), "--text", PROMPT,
                 "--out", str(maps)]) == 0  # fmt: skip
    capsys.readouterr()
    out = tmp_path / "f.pdf"
    assert main(["figure", "--maps", str(maps), "--view", "image", "--picture", "2", "--out", str(out)]) == 0
    recipe = (tmp_path / "f.pdf.recipe.json").read_text()
    assert '"picture": 2' in recipe
    assert main(["figure", "--maps", str(maps), "--view", "image", "--picture", "3", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["attnviz: error: image 3 is not in this result; its prompt holds images 1–2 (choose one of them "
                   "with --picture N)"]  # fmt: skip
