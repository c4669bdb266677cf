"""The captioning demo declares the decoder heads it was trained to point with (guided attention on 1:0 and 1:1),
and Image regions opens on them: each object word of the sample caption then lights its own object.

Independent references: the training config recorded in the file (``align_heads``), and the gold boxes of the
sample scene from the task's own scene generator (the sample image is that scene, pixel for pixel)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gui_helpers import open_and_wait

pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "captioning.onnx"
IMAGE = ROOT / "resources" / "samples" / "captioning.png"
GRID, SIDE = 8, 64


def _meta() -> dict:
    import onnx

    from attnviz.core import metadata

    if not MODEL.exists():
        pytest.skip("the captioning demo is not in this checkout")
    return metadata.parse({p.key: p.value for p in onnx.load(str(MODEL), load_external_data=False).metadata_props})


def _sample_scene():
    """The sample scene with its gold boxes; the shipped sample image must be this very scene."""
    from PIL import Image

    from attnviz.training.tasks import get_task

    task = get_task("captioning")
    scene = task.scenes("sample", 1, SIDE)[0]
    assert np.array_equal(np.asarray(Image.open(IMAGE).convert("RGB")), scene.image)
    return scene


def _peak_inside(patch_map: np.ndarray, box) -> bool:
    """The pointing game's strict hit: the centre of the peak cell lies inside the box (x0, y0, x1, y1), pixels."""
    r, c = np.unravel_index(int(np.argmax(patch_map)), patch_map.shape)
    cy, cx = (r + 0.5) * SIDE / GRID, (c + 0.5) * SIDE / GRID
    x0, y0, x1, y1 = box
    return bool(x0 <= cx < x1 and y0 <= cy < y1)


def test_the_declared_heads_are_the_trained_ones():
    from attnviz.core import metadata

    meta = _meta()
    heads, convention = metadata.alignment_heads(meta)
    train = meta["config"]["train"]
    assert [list(h) for h in heads] == train["align_heads"] == [[1, 0], [1, 1]]
    assert convention == train["align_convention"] == "predict"


def test_each_object_word_points_at_its_object_at_the_declared_heads():
    from attnviz.core import metadata
    from attnviz.runtime import open_model

    heads, _ = metadata.alignment_heads(_meta())
    scene = _sample_scene()
    res = open_model(MODEL, provider="cpu").analyze(image=str(IMAGE), generate=14)
    assert tuple(res.generated[: len(scene.words)]) == scene.words  # the caption is right, so rows are its words
    cross = [i for i, s in enumerate(res.sites) if s.kind == "cross"]
    for layer, head in heads:
        a = res.maps[cross[layer]].head(0, head)  # [decoder rows, patches]; row w predicts word w
        for w, box in scene.word_boxes.items():
            assert _peak_inside(a[w].reshape(GRID, GRID), box), (layer, head, scene.words[w], box)
    # the head the window used to open on (0:0) does not point: the declaration is what makes the view right
    a = res.maps[cross[0]].head(0, 0)
    assert not all(_peak_inside(a[w].reshape(GRID, GRID), box) for w, box in scene.word_boxes.items())


def test_image_regions_opens_on_the_declared_head(qtbot, real_window):
    _meta()
    scene = _sample_scene()
    w = real_window
    w.select_view("image")
    open_and_wait(qtbot, w, MODEL, image=str(IMAGE))
    sel, blk = w.session.sel, w.session.blocks[w.session.sel.block]
    assert blk.kind == "cross" and (sel.mode, sel.layer, sel.head, sel.rows) == ("head", 1, 0, "predict")
    v = w.image_regions
    rows = [q[1] for q in v.queries]
    for wi, box in scene.word_boxes.items():
        v.set_query(rows.index(wi))  # the word's own row (predict convention)
        assert v.queries[v.query][0] == scene.words[wi]
        assert _peak_inside(v.patch_map, box), (scene.words[wi], box)


def test_a_retrained_captioner_declares_its_guided_heads():
    from attnviz.training.export import build_metadata
    from attnviz.training.tasks import get_task

    task = get_task("captioning")
    mc, tc = task.configs("demo")
    meta = build_metadata(task, mc, tc, None)
    assert meta["alignment"] == {"heads": [[1, 0], [1, 1]], "convention": "predict"}
    assert _meta()["alignment"] == meta["alignment"]  # the shipped file says what a retrain would write
