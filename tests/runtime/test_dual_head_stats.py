"""Head stats on a dual encoder (CLIP, SigLIP) with two images against two texts (view28): the table's caption says
which row's input each tower read (the image tower one image, the text tower one text), and the columns are named
for the axis: the image tower's keys are 2-D patches ("prev. patch", the left neighbour in raster order), the text
tower's are tokens ("prev. token"; its 4 tokens read as a 2 x 2 grid of patches before).

Independent checks: the row layout is figure's (row r = image r // texts, text r % texts: test_dual_images checks
it against transformers); the image tower's statistics are the same in every row holding its image and differ
between the two images, the text tower's likewise per text, which is what the caption says they are."""

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_dual_images import random_images
from test_dual_scores import _folder

from attnviz.core.head_stats import compute_stats, stats_caption, stats_context
from attnviz.core.stats import stat_columns

TEXTS = ["a cat", "a dog ran far"]


def _stats(blk) -> np.ndarray:
    rows = compute_stats(blk.result, blk, -1)
    return np.array([[v for k, v in sorted(r.items()) if k not in ("layer", "head")] for r in rows])


@pytest.mark.parametrize("arch", ["clip", "siglip"])
def test_each_towers_table_says_which_input_it_read(tmp_path, arch):
    from attnviz.runtime import open_model

    paths, _ = random_images(tmp_path, 2, 31, "photo")
    result = open_model(_folder(tmp_path, arch), provider="cpu").analyze(image=[str(p) for p in paths], text=TEXTS)
    assert result.batch_size == 4
    towers = {b.tower: i for i, b in reversed(list(enumerate(result.blocks(0)))) if b.kind == "self"}
    assert set(towers) == {"image", "text"}
    stats = {(r, t): _stats(result.blocks(r)[i]) for r in range(4) for t, i in towers.items()}
    for r in range(4):
        image, text = divmod(r, len(TEXTS))
        img_blk, txt_blk = (result.blocks(r)[towers[t]] for t in ("image", "text"))
        said = stats_caption(result, img_blk)
        assert said.startswith(f"{img_blk.name} of image {image} {paths[image].name}, as in every pair holding it")
        assert said.endswith(f"(pair {r}: image {image} × text {text})")
        said = stats_caption(result, txt_blk)
        assert said.startswith(f"{txt_blk.name} of text {text} “{TEXTS[text]}”, as in every pair holding it")
        # what the captions claim: the image tower's numbers are its image's, the text tower's its text's
        np.testing.assert_array_equal(stats[(r, "image")], stats[(image * len(TEXTS), "image")])
        np.testing.assert_array_equal(stats[(r, "text")], stats[(text, "text")])
    assert not np.array_equal(stats[(0, "image")], stats[(2, "image")])
    assert not np.array_equal(stats[(0, "text")], stats[(1, "text")])
    # the columns named for the axis: patches on the image tower, tokens on the text tower
    img_blk, txt_blk = (result.blocks(0)[towers[t]] for t in ("image", "text"))
    assert stats_context(result, img_blk) == "patches" and stats_context(result, txt_blk) == "text"
    assert stat_columns("patches")["prev"][0] == "prev. patch" and "raster order" in stat_columns("patches")["prev"][1]
    assert stat_columns("text")["prev"][0] == "prev. token"
    # SigLIP's attention-pooling head: a learned probe's row over the patches, no position of its own on their axis
    for blk in result.blocks(0):
        if blk.kind == "pooling":
            assert arch == "siglip" and blk.result.maps[blk.sites[0]].shape[2] == 1
            assert stats_context(result, blk) == "cross-image"
            assert not {"prev", "diag", "distance"} & set(stat_columns("cross-image"))
