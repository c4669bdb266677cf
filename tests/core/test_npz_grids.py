"""An ``attnviz extract`` file keeps the vision tower's patch grid whole: Idefics3's tiles before its global image
(``patch_grid_lead``: without it a reopened file drew the global image alone) and Qwen2-VL's merge order
(``patch_grid_columns``: without it a reopened file drew its patches out of place).  Grids and maps written by hand;
the file's entries read back with numpy."""

from __future__ import annotations

import re
import zipfile
from dataclasses import replace

import numpy as np
import pytest
from test_image_from import _tiled, placed

from attnviz import AttnvizError
from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult, DenseMap, PatchGrid, SiteInfo, TokenAxis
from attnviz.core.io import load_npz, save_npz


def _without(src, dst, *names: str) -> None:
    """``src``'s .npz written again less the entries ``names`` (a file from before they were kept)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            if item.filename.removesuffix(".npy") not in names:
                zout.writestr(item, zin.read(item.filename))


def test_a_tiled_towers_tiles_survive_the_file(tmp_path):
    r = _tiled()
    save_npz(r, tmp_path / "r.npz")
    with np.load(tmp_path / "r.npz") as z:
        assert z["patch_grid"].tolist() == [2, 2, 8] and int(z["patch_grid_lead"]) == 2
    back = load_npz(tmp_path / "r.npz")
    assert back.patch_grid == r.patch_grid and back.token_grid == r.token_grid
    # drawn as before it was written: the two tiles side by side (t{k}(r,c) at its cell) beside the global image
    labels = list(r.tokens.labels)
    ov = vm.overlay_view(back, vm.Selection(mode="head", head=1, image_from="tower"))
    assert (ov.grid.rows, ov.grid.cols) == (2, 4) and ov.global_panel is not None
    mean = r.maps[0].array()[0, 1].mean(axis=0)
    # tile k's patch (r, c) at cell (r, 2k + c) of the tiles' picture, read from its key's label t{k}(r,c)
    cells = [re.sub(r"^t(\d)\((\d),(\d)\)$", lambda m: f"T({m[2]},{2 * int(m[1]) + int(m[3])})", x) for x in labels]
    np.testing.assert_allclose(ov.patch, placed(cells, mean, r"T\((\d+),(\d+)\)"), rtol=1e-6)
    np.testing.assert_allclose(ov.global_panel.patch, placed(labels, mean, r"\((\d+),(\d+)\)"), rtol=1e-6)


def test_a_file_from_before_the_tiles_were_kept_reads_them_from_the_decoders_tiles(tmp_path):
    """No ``patch_grid_lead``: the tower's 8 leading keys are the decoder's 1 x 2 tiles of 2 x 2 patches each, as
    its tiled token grid says; without a tiled decoder grid nothing is guessed."""
    r = _tiled()
    save_npz(r, tmp_path / "r.npz")
    _without(tmp_path / "r.npz", tmp_path / "old.npz", "patch_grid_lead")
    assert load_npz(tmp_path / "old.npz").patch_grid.lead_images == 2
    save_npz(replace(r, token_grid=None), tmp_path / "s.npz")
    _without(tmp_path / "s.npz", tmp_path / "old2.npz", "patch_grid_lead")
    assert load_npz(tmp_path / "old2.npz").patch_grid.lead_images == 0
    # a file whose tile count exceeds the keys before the grid: one line
    with zipfile.ZipFile(tmp_path / "bad.npz", "w") as zout, zipfile.ZipFile(tmp_path / "r.npz") as zin:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "patch_grid_lead.npy":
                with zout.open(item.filename, "w") as f:
                    np.lib.format.write_array(f, np.array(3, np.int64))
                continue
            zout.writestr(item, data)
    with pytest.raises(AttnvizError, match=r"patch_grid_lead names more tiles than keys before the grid; extract"):
        load_npz(tmp_path / "bad.npz")


def test_a_towers_merge_order_survives_the_file(tmp_path):
    """Qwen2-VL's tower keys run merge window by merge window: each cell names its key, kept in the file, so the
    reopened tower's patch (r, c) is still the key labelled (r,c)."""
    order = [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3), (1, 2), (1, 3)]  # 2 x 2 merge windows of a 2 x 4 grid
    columns = tuple(order.index((r, c)) for r in range(2) for c in range(4))
    rng = np.random.default_rng(3)
    maps = rng.random((1, 1, 8, 8)).astype(np.float32)
    r = AttentionResult(
        [DenseMap(maps / maps.sum(-1, keepdims=True))],
        [SiteInfo("encoder", "self", 0, 1, "v", "softmax")],
        tokens=TokenAxis([f"({r},{c})" for r, c in order]),
        patch_grid=PatchGrid(2, 4, 0, columns, 8),
    )
    save_npz(r, tmp_path / "q.npz")
    back = load_npz(tmp_path / "q.npz")
    assert back.patch_grid == r.patch_grid
    ov = vm.overlay_view(back, vm.Selection(mode="head", query=-1))
    want = placed(list(r.tokens.labels), back.maps[0].array()[0, 0].mean(axis=0), r"\((\d+),(\d+)\)")
    np.testing.assert_allclose(ov.patch, want, rtol=1e-6)
