"""A captioner's Image regions: the words' cross-attention over the image (as it opens) or its image encoder's own
attention, chosen in the window or with ``attnviz open --image-from``; --layer/--head are then the encoder's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gui_helpers import open_and_wait

pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "captioning.onnx"
IMAGE = ROOT / "resources" / "samples" / "captioning.png"


def test_the_captioners_encoder_is_the_other_choice(qtbot, real_window):
    w = real_window
    open_and_wait(qtbot, w, MODEL, image=str(IMAGE))
    w.select_view("image")
    v, s = w.image_regions, w.session
    assert [v.from_box.itemData(i) for i in range(v.from_box.count())] == ["words", "tower"]
    assert s.blocks[s.sel.block].kind == "cross"
    v.from_box.setCurrentIndex(1)
    blk = s.blocks[s.sel.block]
    assert (blk.stack, blk.kind) == ("encoder", "self") and v.source()[0] == s.sel.block
    s.select(mode="head", layer=0, head=3)
    # 8 x 8 patches, no CLS: the mean of the patches' rows of encoder layer 0, head 3, row-major on the grid
    enc = next(i for i, site in enumerate(s.result.sites) if site.stack == "encoder")
    want = s.result.maps[enc].array()[0, 3].mean(axis=0).reshape(8, 8)
    assert [q[0] for q in v.queries] == ["all patches (mean)"] and v.strip == []  # no words' strip
    np.testing.assert_allclose(v.patch_map, want, rtol=1e-5)
    v.from_box.setCurrentIndex(0)
    assert s.blocks[s.sel.block].kind == "cross" and v.strip  # the words again, their strip below


@pytest.mark.parametrize(
    "image_from,code,line",
    [
        ("tower", 2, "attnviz: error: layer 1 is out of range; encoder self-attention has layers 0..0"),
        (None, 0, "saved"),  # the words' cross-attention has layers 0..1
    ],
)
def test_open_image_from_checks_layer_against_the_block_it_draws(tmp_path, image_from, code, line):
    shot = tmp_path / "s.png"
    args = ["open", str(MODEL), "--image", str(IMAGE), "--view", "image", "--layer", "1", "--screenshot", str(shot)]
    args += ["--image-from", image_from] if image_from else []
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(ROOT), ATTNVIZ_SETTINGS=str(tmp_path / "s.ini"))
    p = subprocess.run([sys.executable, "-m", "attnviz", *args], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == code, p.stderr[-2000:]
    out = (p.stderr if code else p.stdout).strip().splitlines()
    assert out[-1].startswith(line) and "Traceback" not in p.stderr
