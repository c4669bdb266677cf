"""The Run sidebar at the window's size: a long value wraps onto as many lines as it needs instead of being cut
at the value column's edge, and a padded batch's per-row token counts stand one row a line.  The batch is two
LLaVA prompts padded by transformers' own processor; its counts are the processor's (ids that are neither
padding nor the image placeholder)."""

from __future__ import annotations

import numpy as np
import pytest
from gui_helpers import open_and_wait

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PROMPTS = ["<image> a photo of the cat sat on the mat", "red <image> dog"]


@pytest.fixture
def batch_npz(llava_repo, tmp_path):
    """(saved result of a padded batch of two, the processor's encoding), as `attnviz extract --inputs` writes."""
    import vlm_models as vm
    from PIL import Image

    from attnviz.core import io
    from attnviz.runtime import open_model

    proc = transformers.LlavaProcessor(
        image_processor=transformers.CLIPImageProcessor.from_pretrained(str(llava_repo)),
        tokenizer=transformers.PreTrainedTokenizerFast.from_pretrained(str(llava_repo)),
        patch_size=vm.PATCH,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
    )
    imgs = [Image.fromarray((np.random.default_rng(s).random((32, 32, 3)) * 255).astype(np.uint8)) for s in (5, 6)]
    enc = proc(text=PROMPTS, images=imgs, return_tensors="np", padding=True)
    assert (enc["attention_mask"] == 0).any()  # padded: the rows count differently
    feeds = {k: enc[k] for k in ("pixel_values", "input_ids", "attention_mask")}
    out = tmp_path / "batch.npz"
    io.save_npz(open_model(llava_repo, provider="cpu").analyze(feeds=feeds), out)
    return out, enc


def _needed(tree, item, column: int) -> int:
    """The height the item's text takes wrapped at its column's width (the font's own measure)."""
    from PySide6.QtCore import QRect, Qt
    from PySide6.QtGui import QFontMetrics

    width = tree.header().sectionSize(column) - 2 * (
        tree.style().pixelMetric(tree.style().PixelMetric.PM_FocusFrameHMargin) + 1
    )
    box = QFontMetrics(tree.font()).boundingRect(
        QRect(0, 0, width, 1 << 20), Qt.TextFlag.TextWordWrap, item.text(column)
    )
    return box.height()


def test_run_values_wrap_and_batch_rows_stand_a_line_each(qtbot, real_window, batch_npz):
    import vlm_models as vm

    path, enc = batch_npz
    w = real_window
    w.resize(1400, 900)  # the window's own default size (main_window.py)
    open_and_wait(qtbot, w, path)
    qtbot.wait(50)  # let the resized tree lay its rows out
    ids, mask = enc["input_ids"], enc["attention_mask"]
    words = [int(((ids[b] != vm.IMAGE_TOKEN) & (mask[b] == 1)).sum()) for b in range(2)]
    assert words[0] != words[1]
    run = w.sidebar.values("Run")
    assert run["text tokens"] == "\n".join(f"row {b}: {n} in the decoder" for b, n in enumerate(words))
    # both rows hold 16 image tokens on the 4 x 4 grid: one value (the word before row 1's image is not one of them)
    assert run["image tokens"].startswith(f"{vm.N_IMAGE} in the decoder ({vm.GRID}×{vm.GRID}) · ")
    tree = w.sidebar
    top = tree.section("Run")

    def check_fits():
        for i in range(top.childCount()):
            item = top.child(i)
            shown = tree.visualItemRect(item).height()
            assert shown >= _needed(tree, item, 1), f"{item.text(0)}: {item.text(1)!r} cut to {shown} px"

    check_fits()
    # the user narrows the dock: the rows are measured again at the new width
    from PySide6.QtCore import Qt

    before = sum(tree.visualItemRect(top.child(i)).height() for i in range(top.childCount()))
    w.resizeDocks([w.right_dock], [240], Qt.Orientation.Horizontal)
    qtbot.waitUntil(lambda: tree.width() < 260)
    qtbot.wait(50)
    check_fits()
    after = sum(tree.visualItemRect(top.child(i)).height() for i in range(top.childCount()))
    assert after > before  # narrower: more lines
    maps = next(top.child(i) for i in range(top.childCount()) if top.child(i).text(0) == "maps")
    line = tree.fontMetrics().height()
    assert tree.visualItemRect(maps).height() >= 2 * line  # too long for one line of the column: it wrapped
    assert maps.toolTip(1) == maps.text(1)  # and the tooltip still holds it all
