"""Issue 22, screen = figure on vision–language decoders: the tiny LLaVA and Idefics3 repositories (tiles and a
global image) opened in the real window on the sample image with a typed caption.  For each caption word in Image
regions the overlay is that word's row of the decoder's self-attention over the image tokens, placed by hand from
the token labels (LLaVA's ``img[r,c]``; Idefics3's tiles where the processor's ``<row_i_col_j>`` marker in front of
each tile puts them), and the exported figure draws the same heat, image and words."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from gui_helpers import open_and_wait
from screen_figure import check_image, figure

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
pytest.importorskip("transformers")

SAMPLE = Path(__file__).resolve().parents[2] / "resources" / "samples" / "captioning.png"
CAPTION = "a photo of the cat"
PROMPT = f"<s> <image> {CAPTION}"


def placed_by_hand(keys: list[str], row: np.ndarray) -> np.ndarray:
    """The image as the tokens' labels lay it out: ``img[r,c]`` at (r, c); a tile's ``t{k}[r,c]`` at (r, c) of
    the tile the last ``<row_i_col_j>`` marker before it names (1-based, as the processor writes them); the global
    image's ``g[r,c]`` is not part of the tiled picture."""
    cells: dict[tuple[int, int], float] = {}
    tile, side = (0, 0), 0
    for key, label in enumerate(keys):
        if m := re.fullmatch(r"<row_(\d+)_col_(\d+)>", label):
            tile = (int(m[1]) - 1, int(m[2]) - 1)
        elif m := re.fullmatch(r"(?:img|t\d+)\[(\d+),(\d+)\]", label):
            r, c = int(m[1]), int(m[2])
            side = max(side, r + 1)
            cells[(r, c, *tile)] = float(row[key])  # type: ignore[index]
    tiles_r = 1 + max(k[2] for k in cells)
    tiles_c = 1 + max(k[3] for k in cells)
    cols = 1 + max(k[1] for k in cells)
    out = np.full((tiles_r * side, tiles_c * cols), np.nan, np.float32)
    for (r, c, tr, tc), v in cells.items():
        out[tr * side + r, tc * cols + c] = v
    assert not np.isnan(out).any(), "every cell of the picture has a token"
    return out


@pytest.mark.parametrize(
    "repo, tiles",
    [("llava_repo", (1, 1)), ("idefics3_repo", (2, 2))],  # the 64 px sample is resized to 96: 2 x 2 tiles of 48
)
def test_each_caption_word_shows_its_row_over_the_image_on_screen_and_in_the_figure(
    qtbot, real_window, request, repo, tiles
):
    w = real_window
    open_and_wait(qtbot, w, request.getfixturevalue(repo), text=PROMPT, image=str(SAMPLE))
    r = w.session.result
    w.select_view("image")
    v = w.image_regions
    bi, grid, kind = v.source()
    blk = w.session.blocks[bi]
    assert (blk.stack, kind) == ("decoder", "self")
    keys = list(blk.key_axis.labels)
    assert [q for q, _ in v.queries] == CAPTION.split()  # the strip of words: the caption, not the image tokens
    decoder = [i for i, s in enumerate(r.sites) if (s.stack, s.kind) == ("decoder", "self")]
    for mode, layer, head in (("head", 1, 2), ("head", 0, 0), ("mean", 1, 0)):
        w.session.select(block=bi, mode=mode, layer=layer, head=head, layer_lo=layer, layer_hi=layer)
        for i, (word, row) in enumerate(v.queries):
            v.set_query(i)
            assert keys[row] == word
            att = r.maps[decoder[layer]].array()[0]  # [heads, query, key]
            want_row = att[head, row] if mode == "head" else att.mean(axis=0)[row]
            want = placed_by_hand(keys, want_row)
            assert want.shape == (grid.rows, grid.cols)
            np.testing.assert_allclose(v.patch_map, want, rtol=1e-5, atol=1e-8)
            fig = figure(w, v)
            check_image(w, fig)  # the figure: the same image base, heat, colours and query word
            assert f"query “{word}”" in v.info.text()
    markers = [k for k in keys if k.startswith("<row_")]
    assert max(1, len(markers)) == tiles[0] * tiles[1]
    first = min(k for k, label in enumerate(keys) if label.startswith(("img[", "t0[")))
    said = "tiles in place" if tiles != (1, 1) else f"image tokens at keys {first}–{first + grid.n - 1}"
    assert said in v.info.text()  # not "+1 non-patch": the <s> in front is one of the words
