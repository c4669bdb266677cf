"""Image regions of SigLIP: its attention-pooling head (one learned query over the image tower's patches, the map
researchers look at for SigLIP) is offered beside the vision tower.  The tiny SigLIP in the real window: choosing
"pooling head" selects its block and draws its one query's row, placed on the patch grid by hand from the keys'
labels (``(r,c)``); picking the tower's block in the sidebar draws the tower again; the export draws the same."""

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
pytest.importorskip("matplotlib")

import dual_cache  # (the export, once per machine)
import hf_models

IMAGE = Path(__file__).resolve().parents[2] / "resources" / "samples" / "captioning.png"


def placed(labels: list[str], row: np.ndarray) -> np.ndarray:
    cells = {
        (int(m[1]), int(m[2])): float(row[k])
        for k, lab in enumerate(labels)
        if (m := re.fullmatch(r"\((\d+),(\d+)\)", lab))
    }
    out = np.full((1 + max(r for r, _ in cells), 1 + max(c for _, c in cells)), np.nan, np.float32)
    for (r, c), v in cells.items():
        out[r, c] = v
    assert not np.isnan(out).any()
    return out


def test_siglips_pooling_head_over_the_patches(qtbot, real_window, tmp_path):
    path = dual_cache.export_dual("siglip", "model", tmp_path)
    hf_models.word_tokenizer(99, bert_style=False).save_pretrained(str(tmp_path))
    w = real_window
    open_and_wait(qtbot, w, path, image=str(IMAGE), text="a cat on a mat")
    r, s, v = w.session.result, w.session, w.image_regions
    w.select_view("image")
    box = v.from_box
    assert box.isVisible() and [box.itemText(i) for i in range(box.count())] == ["vision tower", "pooling head"]
    assert box.currentIndex() == 0 and s.blocks[v.source()[0]].kind == "self"
    # no [CLS] in SigLIP's tower: nothing in brackets after the grid's size (it said "+0 non-patch")
    g = v.source()[1]
    assert f"grid {g.rows}×{g.cols} · peak at patch (" in v.info.text() and "non-patch" not in v.info.text()
    box.setCurrentIndex(1)  # as a user picks it
    pool = next(i for i, b in enumerate(s.blocks) if b.kind == "pooling")
    assert s.sel.image_from == "pooling" and s.sel.block == pool == v.source()[0]
    assert [q[0] for q in v.queries] == ["pooling query"]
    labels = list(s.blocks[pool].key_axis.labels)
    probe = r.maps[s.blocks[pool].sites[0]].array()[0]  # [heads, 1, patches]
    np.testing.assert_allclose(v.patch_map, placed(labels, probe.mean(axis=0)[0]), rtol=1e-5, atol=1e-8)
    s.select(mode="head", head=1)
    np.testing.assert_allclose(v.patch_map, placed(labels, probe[1, 0]), rtol=1e-5, atol=1e-8)
    assert "pooling query" in v.info.text() and f"grid {g.rows}×{g.cols} · peak at patch (" in v.info.text()
    check_image(w, figure(w, v))  # File ▸ Export view: the same map
    w.controls.block.setCurrentIndex(0)  # the sidebar's tower block: the tower again
    assert s.sel.image_from == "tower" and box.currentData() == "tower" and v.source()[0] == 0
