"""The app on the real runtime with tiny exported Hugging Face models (BERT, BART, ViT) and an MLP."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gui_helpers import open_and_wait, run_and_wait

pytest.importorskip("onnxruntime")


def test_text_model_type_text(qtbot, real_window, onnx_dir):
    w = real_window
    open_and_wait(qtbot, w, onnx_dir["text"])
    assert w.session.model.kind == "encoder"
    assert w.sidebar.values("Model")["device"] == "CPUExecutionProvider"
    assert set(w.sidebar.values("Attention sites")) == {"encoder self L0", "encoder self L1"}
    assert len(w.overview.thumbs) == 2 * 4
    w.select_view("head")
    run_and_wait(qtbot, w, text="a dog ran in the park")
    hm = w.head_map.heatmap
    assert hm.y_axis.labels == ["[CLS]", "a", "dog", "ran", "in", "the", "park", "[SEP]"]
    np.testing.assert_allclose(hm.mv.matrix.sum(-1), 1.0, rtol=1e-4)  # real softmax rows
    qtbot.mouseMove(hm.plot.viewport(), hm.widget_pos_of(2, 6))
    qtbot.waitUntil(lambda: hm.hover == (2, 6), timeout=2000)
    assert hm.hover_label.text().startswith("query “dog” (2) → key “park” (6): ")
    w.controls.hide_special.setChecked(True)
    assert hm.y_axis.labels == ["a", "dog", "ran", "in", "the", "park"]


def test_translation_generate(qtbot, real_window, onnx_dir):
    w = real_window
    open_and_wait(qtbot, w, onnx_dir["mt"], generate=4)
    r = w.session.result
    assert w.session.model.kind == "encoder-decoder"
    assert len(r.generated) >= 1
    assert [b.name for b in w.session.blocks] == [
        "encoder self-attention",
        "decoder self-attention",
        "decoder cross-attention",
    ]
    w.select_view("alignment")
    al = w.alignment
    assert al.mv.q_labels == [g for g in r.generated][: al.mv.matrix.shape[0]]
    assert al.mv.k_labels == r.tokens.labels
    assert al.mv.matrix.shape[1] == len(r.tokens)
    if len(r.generated) > 1:
        w.controls.step.setValue(0)
        assert al.step_label.text().startswith(f"step 1/{len(r.generated)}")


def test_vision_model_image(qtbot, real_window, onnx_dir):
    w = real_window
    open_and_wait(qtbot, w, onnx_dir["vit"], image=str(onnx_dir["image"]))
    assert w.session.result.patch_grid is not None
    w.select_view("image")
    v = w.image_regions
    assert [q for q, _ in v.queries][0] == "[CLS]"  # the query axis label of position 0
    assert v.patch_map.shape == (4, 4)
    assert v.image_item.image.shape == (32, 32, 3)


def test_no_attention_and_garbage(qtbot, real_window, onnx_dir, tmp_path):
    w = real_window
    with qtbot.waitSignal(w.error_shown, timeout=30000):
        w.open_path(onnx_dir["mlp"])
    assert "no attention" in w.last_error
    assert w.sidebar.values("Attention sites")["none"].startswith("no attention found")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00not a model")
    with qtbot.waitSignal(w.error_shown, timeout=30000):
        w.open_path(bad)
    assert "bad.onnx" in w.last_error and "Traceback" not in w.last_error
    open_and_wait(qtbot, w, onnx_dir["text"])  # still usable


def test_unreadable_image_on_real_vit(qtbot, real_window, onnx_dir, tmp_path):
    w = real_window
    open_and_wait(qtbot, w, onnx_dir["vit"], image=str(onnx_dir["image"]))
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8 this is not a jpeg")
    with qtbot.waitSignal(w.error_shown, timeout=30000):
        w.open_path(bad)
    assert "cannot open it as an image" in w.last_error
    assert w.session.result is not None


def test_screenshot_command(onnx_dir, tmp_path):
    shot = tmp_path / "shot.png"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnviz",
            "open",
            str(onnx_dir["text"]),
            "--text",
            "the dog sat",
            "--view",
            "head",
            "--screenshot",
            str(shot),
            "--size",
            "1000x700",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert p.returncode == 0, p.stderr
    from PIL import Image

    im = Image.open(shot)
    assert im.size == (1000, 700)
    # the heatmap is drawn: plenty of non-grey pixels
    a = np.asarray(im.convert("RGB")).astype(int)
    colourful = (np.abs(a[..., 0] - a[..., 1]) + np.abs(a[..., 1] - a[..., 2]) > 60).mean()
    assert colourful > 0.05


def test_screenshot_bad_model_exits_2(onnx_dir, tmp_path):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    p = subprocess.run(
        [sys.executable, "-m", "attnviz", "open", str(onnx_dir["mlp"]), "--screenshot", str(tmp_path / "s.png")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert p.returncode == 2
    assert "no attention" in p.stderr and "Traceback" not in p.stderr


def test_plain_attnviz_opens_the_demo(tmp_path):
    """`attnviz` with no argument opens the bundled demo model (or says clearly that it is missing)."""
    from attnviz.gui.app import demo_model

    shot = tmp_path / "demo.png"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    p = subprocess.run(
        [sys.executable, "-m", "attnviz", "open", "--screenshot", str(shot)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    if demo_model() is None:
        assert p.returncode == 2 and "demo models are missing" in p.stderr
    else:
        assert p.returncode == 0, p.stderr
        assert shot.stat().st_size > 10_000


def test_decoder_only_generation_steps(qtbot, real_window, onnx_dir):
    w = real_window
    open_and_wait(qtbot, w, onnx_dir["gpt"], generate=3)
    r = w.session.result
    assert w.session.model.kind == "decoder" and r.prompt_len == 3 and len(r.generated) == 3
    assert [b.name for b in w.session.blocks] == ["decoder self-attention"]
    w.select_view("head")
    hm = w.head_map.heatmap
    assert hm.mv.matrix.shape == (5, 5)  # prompt + generated except the last
    assert np.allclose(np.triu(hm.mv.matrix, 1), 0, atol=1e-6)  # causal
    w.controls.step.setValue(0)  # the step that chose the first generated token
    assert hm.mv.matrix.shape == (3, 3) and hm.y_axis.labels == ["the", "cat", "sat"]
    w.select_view("alignment")
    assert "needs cross-attention" in w.alignment.message


def test_captioning_image_words(qtbot, real_window, onnx_dir):
    w = real_window
    open_and_wait(qtbot, w, onnx_dir["captioner"], image=str(onnx_dir["image"]), generate=3)
    r = w.session.result
    assert w.session.model.kind == "vision-decoder"
    w.select_view("image")
    v = w.image_regions
    assert [q for q, _ in v.queries] == r.generated
    assert len(v.strip) == len(r.generated)
    assert v.patch_map.shape == (4, 4)
    # it opens on the word whose attention is most focused
    peaks = [v.patch_map_for(i).max() for i in range(len(v.queries))]
    assert v.query == int(np.argmax(peaks))
    word = r.generated[v.query]
    place = f" (word {v.query + 1})" if r.generated.count(word) > 1 else ""  # a repeated word named by its place
    assert v.info.text().startswith(f"query “{word}”{place} · decoder cross-attention")
    w.select_view("alignment")
    assert w.alignment.mv.k_labels[0] == "[CLS]" and len(w.alignment.mv.k_labels) == 17


def test_opening_with_an_input_runs_the_model_once(qtbot, real_window, onnx_dir, runs):
    """Issue 8, Build 8 in the window: opening runs the given input at once, so no dummy probe run before it;
    the sidebar's head counts come from that one run."""
    w = real_window
    open_and_wait(qtbot, w, onnx_dir["text"], text="a dog ran in the park")
    assert len(runs) == 1, runs  # the user's input, not a probe and then the input
    assert runs[0]["input_ids"] == (1, 8)
    heads = {s.label: s.heads for s in w.session.model.sites}
    assert heads == {"encoder self L0": 4, "encoder self L1": 4}  # counted by the run, as transformers has them
    assert w.sidebar.values("Attention sites")["encoder self L0"].startswith("4 heads")


@pytest.mark.parametrize(
    "focus,msg",
    [
        (["--layer", "9"], "layer 9 is out of range; encoder self-attention has layers 0..1"),
        (["--layer", "1", "--head", "7"], "head 7 is out of range; encoder self-attention layer 1 has heads 0..3"),
        (["--block", "4"], "block 4 is out of range; this model has blocks 0 (encoder self)"),
    ],
)
def test_screenshot_of_a_head_that_is_not_there_exits_2_naming_the_range(tmp_path, focus, msg):
    """As `figure` does: the session clamped --layer 9 to the last layer and saved that picture with exit 0."""
    model = Path(__file__).resolve().parents[2] / "models" / "sequence-classification.onnx"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    p = subprocess.run(
        [sys.executable, "-m", "attnviz", "open", str(model), *focus, "--screenshot", str(tmp_path / "s.png")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines()[-1] == f"attnviz: error: {msg}" and "Traceback" not in p.stderr
