"""Issue 22, screen = figure on vision–language decoders: the tiny LLaVA and Idefics3 repositories (tiles and a
global image) opened in the real window on the sample image with a typed caption.  For each caption word in Image
regions the overlay is that word's row of the decoder's self-attention over the image tokens, placed by hand from
the token labels, named as the tower names its patches (LLaVA's ``(r,c)``; Idefics3's tiles ``tile k·(r,c)`` where
the processor's ``<row_i_col_j>`` marker in front of each tile puts them, and its global image's ``(r,c)`` in a
second picture beside them), and the exported figure draws the same pictures, heat, captions and words."""

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
TILE = re.compile(r"tile \d+·\((\d+),(\d+)\)")  # a tile's token (core/patch_names.py)
CELL = re.compile(r"\((\d+),(\d+)\)")  # an image's token: the global image's beside tiles


def tiled(keys: list[str]) -> bool:
    return any(TILE.fullmatch(k) for k in keys)


def global_by_hand(keys: list[str], row: np.ndarray) -> np.ndarray | None:
    """The global image as its tokens' labels lay it out: ``(r,c)`` at (r, c) beside tiles (None: no tiles, so no
    global image's tokens)."""
    if not tiled(keys):
        return None
    cells = {(int(m[1]), int(m[2])): float(row[k]) for k, lab in enumerate(keys) if (m := CELL.fullmatch(lab))}
    if not cells:
        return None
    out = np.full((1 + max(r for r, _ in cells), 1 + max(c for _, c in cells)), np.nan, np.float32)
    for (r, c), v in cells.items():
        out[r, c] = v
    assert not np.isnan(out).any(), "every cell of the global image has a token"
    return out


def placed_by_hand(keys: list[str], row: np.ndarray) -> np.ndarray:
    """The image as the tokens' labels lay it out: ``(r,c)`` at (r, c); a tile's ``tile k·(r,c)`` at (r, c) of
    the tile the last ``<row_i_col_j>`` marker before it names (1-based, as the processor writes them); beside
    tiles, the global image's ``(r,c)`` is a picture of its own (:func:`global_by_hand`)."""
    pattern = TILE if tiled(keys) else CELL
    cells: dict[tuple[int, int], float] = {}
    tile, side = (0, 0), 0
    for key, label in enumerate(keys):
        if m := re.fullmatch(r"<row_(\d+)_col_(\d+)>", label):
            tile = (int(m[1]) - 1, int(m[2]) - 1)
        elif m := pattern.fullmatch(label):
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
    # the strip of words: the caption, not the image tokens; each row named by the word it produced (words24): the
    # caption's next word, and the last row's "(next)" (nothing was generated)
    assert [q for q, _ in v.queries] == [*CAPTION.split()[1:], "(next)"]
    decoder = [i for i, s in enumerate(r.sites) if (s.stack, s.kind) == ("decoder", "self")]
    for mode, layer, head in (("head", 1, 2), ("head", 0, 0), ("mean", 1, 0)):
        w.session.select(block=bi, mode=mode, layer=layer, head=head, layer_lo=layer, layer_hi=layer)
        for i, (word, row) in enumerate(v.queries):
            v.set_query(i)
            assert (keys[row + 1] if row + 1 < len(keys) else "(next)") == word
            att = r.maps[decoder[layer]].array()[0]  # [heads, query, key]
            want_row = att[head, row] if mode == "head" else att.mean(axis=0)[row]
            want = placed_by_hand(keys, want_row)
            assert want.shape == (grid.rows, grid.cols)
            np.testing.assert_allclose(v.patch_map, want, rtol=1e-5, atol=1e-8)
            glob = global_by_hand(keys, want_row)  # the global image beside the tiles (Idefics3), or none
            assert (v.global_map is None) == (glob is None) == (tiles == (1, 1))
            if glob is not None:
                np.testing.assert_allclose(v.global_map, glob, rtol=1e-5, atol=1e-8)
                shares = (float(np.nansum(want)), float(glob.sum()))  # the row's weight on each picture
                captions = [c.textItem.toPlainText() for c in v.captions if c.isVisible()]
                assert captions == [f"tiles · {shares[0]:.0%} of the row", f"global image · {shares[1]:.0%} of the row"]
            fig = figure(w, v)
            check_image(w, fig)  # the figure: the same image base, heat, colours and query word
            assert f"query “{word}”" in v.info.text()
    markers = [k for k in keys if k.startswith("<row_")]
    assert max(1, len(markers)) == tiles[0] * tiles[1]
    first = min(k for k, label in enumerate(keys) if (TILE if tiled(keys) else CELL).fullmatch(label))
    said = "tiles in place" if tiles != (1, 1) else f"image tokens at keys {first}–{first + grid.n - 1}"
    assert said in v.info.text()  # not "+1 non-patch": the <s> in front is one of the words


def test_a_click_on_the_global_image_makes_its_token_the_query(qtbot, real_window, idefics3_repo):
    """A click on the global image's picture: the query is the global image's token under it (``(r,c)``), its
    cell outlined on that picture only, and the export draws the same."""
    from PySide6.QtCore import QPointF, Qt

    w = real_window
    open_and_wait(qtbot, w, idefics3_repo, text=PROMPT, image=str(SAMPLE))
    w.select_view("image")
    v = w.image_regions
    w.session.select(mode="head", layer=1, head=3)
    v.draw()
    whole = v.source()[1].global_grid
    h, wd = v._image_size
    scene = v.gvb.mapViewToScene(QPointF(2.5 * wd / whole.cols, 1.5 * h / whole.rows))  # cell (1, 2)
    qtbot.mouseClick(v.glw.viewport(), Qt.MouseButton.LeftButton, pos=v.glw.mapFromScene(scene))
    label, row = v.queries[v.query]
    keys = list(w.session.blocks[v.source()[0]].key_axis.labels)
    assert label == "global image patch (1, 2)" and keys[row] == "(1,2)" and row == whole.key(1, 2)
    assert v.g_outline.isVisible() and not v.query_outline.isVisible()
    r = v.g_outline.rect()
    assert (r.x(), r.y(), r.width(), r.height()) == pytest.approx((2 * wd / 3, h / 3, wd / 3, h / 3))
    check_image(w, figure(w, v))
