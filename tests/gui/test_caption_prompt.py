"""A caption typed in the window drives a captioning model's decoder exactly as ``--text`` does on the command line:
teacher-forced with generate 0, continued with generate > 0, generated from the image alone when empty.
The shipped captioning demo runs through the real engine; the reference is ``attnviz extract``'s .npz."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gui_helpers import open_and_wait, run_and_wait

pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "captioning.onnx"
IMAGE = ROOT / "resources" / "samples" / "captioning.png"


@pytest.fixture
def captioning(qtbot, real_window):
    if not MODEL.exists():
        pytest.skip("the captioning demo is not in this checkout")
    open_and_wait(qtbot, real_window, MODEL, image=str(IMAGE))
    return real_window


def cli(tmp_path, *args) -> object:
    from attnviz.cli import main
    from attnviz.core.io import load_npz

    out = tmp_path / f"cli{len(list(tmp_path.iterdir()))}.npz"
    assert main(["extract", str(MODEL), "--image", str(IMAGE), *args, "--out", str(out)]) == 0
    return load_npz(out)


def same_maps(a, b) -> None:
    assert len(a.maps) == len(b.maps)
    for x, y in zip(a.maps, b.maps):
        np.testing.assert_allclose(x.array(), y.array(), atol=1e-6)


def test_caption_field_is_open_for_a_captioning_model(qtbot, captioning):
    w = captioning
    t = w.inputs.text
    assert t.isEnabled() and t.placeholderText().startswith("caption") and t.text() == ""
    assert "generate 0" in t.toolTip() and "--text" in t.toolTip()
    assert w.inputs.form.labelForField(t).text() == "caption"
    assert not w.inputs.text_pair.isEnabled()  # a captioning model has no second sentence


def test_typed_caption_is_teacher_forced_and_the_regions_follow_it(qtbot, captioning, tmp_path):
    w = captioning
    run_and_wait(qtbot, w, text="a red square below a green circle", generate=0)
    r = w.session.result
    words = ["a", "red", "square", "below", "a", "green", "circle"]
    assert not r.generated and r.prompt_len == 1 + len(words)
    assert r.key_tokens.labels == ["<bos>", *words]
    w.select_view("image")
    v = w.image_regions
    # one region map per caption word, at the row that chose it (the rule generated words follow): word p <- row p-1
    assert v.queries == [(word, p) for p, word in enumerate(words)]
    # the regions are the declared pointing head's, decoder layer 1 head 0 (attnviz.alignment)
    assert (w.session.sel.layer, w.session.sel.head) == (1, 0)
    cross = r.maps[[i for i, s in enumerate(r.sites) if s.kind == "cross"][1]].array()  # [1, H, Tq, 64]
    for qi in (1, 6):  # "red" and "circle"
        v.set_query(qi)
        np.testing.assert_allclose(v.patch_map, cross[0, 0, qi].reshape(8, 8), atol=1e-7)
        assert v.info.text().startswith(f"query “{words[qi]}”")
    same_maps(r, cli(tmp_path, "--text", "a red square below a green circle"))
    # the exported strip: the input image, then one panel per typed word, captioned by it as its button reads
    # ("a" twice: "a (1)" and "a (5)", words24), and the window's thumbnails the same
    from attnviz.figures import FigureSpec, render_spec

    named = ["a (1)", "red", "square", "below", "a (5)", "green", "circle"]
    assert [b.text() for b in v.query_bar.buttons] == named == [b.text() for b in v.strip]
    fig = render_spec(r, FigureSpec(view="strip", dpi=30))
    assert len([ax for ax in fig.axes if ax.images]) == len(words) + 1  # the panels (and their colour bar)
    assert [t.get_text() for t in fig.texts][1 : len(words) + 1] == named


def test_caption_start_is_continued_and_empty_generates(qtbot, captioning, tmp_path):
    w = captioning
    run_and_wait(qtbot, w, text="a red", generate=6)
    r = w.session.result
    ref = cli(tmp_path, "--text", "a red", "--generate", "6")
    assert r.prompt_len == 3 and r.key_tokens.labels[:3] == ["<bos>", "a", "red"]
    assert r.generated == ref.generated and r.generated  # the model continued the typed start
    same_maps(r, ref)
    w.select_view("image")
    labels = [q for q, _ in w.image_regions.queries]
    assert labels[:2] == ["a", "red"] and len(labels) == 2 + len(r.generated)  # typed, then generated words
    w.session.select(step=0)  # the first generated word, after the typed ones
    assert w.image_regions.query == 2
    run_and_wait(qtbot, w, text="", generate=6)
    assert w.session.result.generated == cli(tmp_path, "--generate", "6").generated  # as before: from the image
    assert w.session.result.prompt_len == 1


def test_unknown_caption_word_is_one_message(qtbot, captioning):
    w = captioning
    with qtbot.waitSignal(w.error_shown, timeout=30000):
        w.inputs.set_values(text="a zebra", generate=0)
        w.inputs.run_button.click()
    assert "unknown token 'zebra'" in w.last_error and "\n" not in w.last_error


def test_open_command_takes_the_caption_and_the_image_base(tmp_path):
    """`attnviz open --text CAPTION --image-base colour` on the captioning demo: the window shows the typed caption's
    words, and the blue triangle stays blue on screen (it does not with the default grey image)."""
    import os
    import subprocess
    import sys

    from PIL import Image

    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(ROOT), ATTNVIZ_SETTINGS=str(tmp_path / "s.ini"))
    blue = {}
    for base in ("colour", "grey"):
        shot = tmp_path / f"{base}.png"
        args = ["open", str(MODEL), "--image", str(IMAGE), "--text", "a purple circle", "--generate", "0"]
        args += ["--view", "image", "--image-base", base, "--screenshot", str(shot), "--size", "1000x700"]
        p = subprocess.run(
            [sys.executable, "-m", "attnviz", *args], capture_output=True, text=True, env=env, timeout=120
        )
        assert p.returncode == 0, p.stderr[-2000:]
        a = np.asarray(Image.open(shot).convert("RGB")).astype(int)
        blue[base] = int(((a[..., 2] - a[..., 0] > 80) & (a[..., 2] > 150)).sum())
    # the same window apart from the image base (the progress bar is blue in both): thousands more blue pixels
    assert blue["colour"] - blue["grey"] > 2000, blue
