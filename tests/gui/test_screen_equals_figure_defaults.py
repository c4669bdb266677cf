"""One set of defaults (issue 25 item 3), drawn alike (issue 28 item 3).

A shipped demo opened in the window with nothing chosen shows what ``attnviz figure`` draws with no selection flags
and no ``--generate``: the same selection (the view model's ``default_selection``), the same generation steps
(``default_generate``) and so the same figure, byte for byte, for every view the window exports.  The strip, which
the window has no tab for, draws the Alignment view's rows: the same words, weights (special tokens hidden, mass
kept) and colour-bar words as on screen.  The speech demo opens on Audio regions, which ``figure`` without ``--view``
draws for it (core.view.opening).  The real engine runs both sides."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("onnxruntime")

from gui_helpers import demo, kind_by_hand, open_and_wait, shown_tab, speech_demo
from spoken_demo import hand_map_thumbnails

from attnviz.cli import main
from attnviz.core.view import OPENING_VIEWS
from attnviz.core.view_names import tab_title


def export(qtbot, w, view: str, out: Path) -> bytes:
    w.select_view(view)
    w.export_view(out)
    qtbot.waitUntil(lambda: w.last_export == out, timeout=60000)
    return out.read_bytes()


@pytest.mark.parametrize(
    "name, views, opens_on",
    [
        # the translation demo declares decoder layer 2 head 0 with "input" rows: it opens on that head
        ("translation", ("heatmap", "links", "alignment"), ("decoder", "cross", "head", 2, 0)),
        # nothing declared: the mean over the heads of the last layer of the first block
        ("sequence-classification", ("heatmap", "links", "overview"), ("encoder", "self", "mean", 1, None)),
    ],
)
def test_the_window_opens_where_figure_draws_without_flags(qtbot, real_window, tmp_path, capsys, name, views, opens_on):
    path = demo(name)
    w = real_window
    open_and_wait(qtbot, w, path, timeout=60000)
    sel, blk = w.session.sel, w.session.block
    stack, kind, mode, layer, head = opens_on
    assert (blk.stack, blk.kind, sel.mode, sel.layer) == (stack, kind, mode, layer)
    assert head is None or sel.head == head
    if mode != "head":
        assert (sel.layer_lo, sel.layer_hi) == (layer, layer)
        assert "layer 1 · mean over heads" in w.session.current_map().title
    for view in views:
        ours = export(qtbot, w, view, tmp_path / f"window-{view}.png")
        theirs = tmp_path / f"figure-{view}.png"
        assert main(["figure", str(path), "--view", view, "--out", str(theirs)]) == 0
        assert theirs.read_bytes() == ours, f"{view}: the window's default and figure's default differ"
        recipe = json.loads((tmp_path / f"figure-{view}.png.recipe.json").read_text())
        # the window's generation steps (32 for translation) are figure's when --generate is not given
        assert recipe["inputs"]["generate"] == w.inputs.values()["generate"]
    capsys.readouterr()


def test_the_speech_demo_opens_on_audio_regions_and_figure_draws_it_without_flags(qtbot, real_window, tmp_path):
    """With nothing chosen the speech demo opens on Audio regions (core.view.opening; its kind read here from the
    model's inputs) and ``figure`` with no flags at all, no ``--view`` either, draws the same bytes."""
    path = speech_demo()
    w = real_window
    assert shown_tab(w) == "Overview"  # a new window's first tab
    open_and_wait(qtbot, w, path, timeout=60000)
    kind = kind_by_hand(w.session.model)
    assert kind == "speech"
    assert shown_tab(w) == tab_title(OPENING_VIEWS[kind].window) == "Audio regions"
    # it draws a word's attention over the clip, not why it cannot
    assert w.audio_regions.reason() is None and w.audio_regions.shown_query() is not None
    ours = tmp_path / "window.png"
    w.export_view(ours)  # File ▸ Export view of the tab the model opened on
    qtbot.waitUntil(lambda: w.last_export == ours, timeout=60000)
    theirs = tmp_path / "figure.png"
    assert main(["figure", str(path), "--out", str(theirs)]) == 0  # no --view, no selection flags
    assert theirs.read_bytes() == ours.read_bytes()
    recipe = json.loads((tmp_path / "figure.png.recipe.json").read_text())
    assert recipe["view"]["view"] == OPENING_VIEWS[kind].figure == "audio"


def test_the_speech_demos_maps_end_with_the_clip_on_screen_and_on_paper(qtbot, real_window, tmp_path, capsys):
    """The demo pads its 2.3-s sample to a 4-s window: the Head map, Alignment and Overview draw the clip's frames
    (counted here from the WAV's header: a frame is two 160-sample hops), as `figure` without flags does, byte for
    byte; the "show padding" box draws all 200, as `figure --padding` does.  A text model has no such box."""
    import soundfile as sf

    path = speech_demo()
    clip = math.ceil(sf.info(str(path / "sample.wav")).frames / 320)
    w = real_window
    open_and_wait(qtbot, w, path, timeout=60000)
    box = w.controls.padding
    assert not box.isHidden() and not box.isChecked()
    for view in ("heatmap", "alignment", "overview"):
        ours = export(qtbot, w, view, tmp_path / f"window-{view}.png")
        theirs = tmp_path / f"figure-{view}.png"
        assert main(["figure", str(path), "--view", view, "--out", str(theirs)]) == 0
        assert theirs.read_bytes() == ours, f"{view}: the window's clip and figure's differ"
    hm = w.head_map.heatmap
    np.testing.assert_array_equal(hm.mv.k_pos, np.arange(clip))
    assert hm.full_title.endswith(f"the clip: frames 0–{clip - 1} of 200 (padding cut)")  # (said on screen)
    np.testing.assert_array_equal(w.alignment.heatmap.mv.k_pos, np.arange(clip))
    note = f"the clip: frames 0–{clip - 1} of 200 (padding cut)"
    w.select_view("overview")
    assert note in w.overview.info.text()
    overview_per_block(qtbot, w, clip, tmp_path)
    box.setChecked(True)  # the whole window
    assert w.session.sel.padding and note not in w.overview.info.text()
    ours = export(qtbot, w, "heatmap", tmp_path / "window-padding.png")
    assert hm.mv.matrix.shape[1] == 200 and "padding" not in hm.full_title
    theirs = tmp_path / "figure-padding.png"
    assert main(["figure", str(path), "--view", "heatmap", "--padding", "--out", str(theirs)]) == 0
    assert theirs.read_bytes() == ours
    assert json.loads((tmp_path / "figure-padding.png.recipe.json").read_text())["view"]["padding"] is True
    open_and_wait(qtbot, w, demo("translation"), timeout=60000)
    assert box.isHidden()  # nothing after a clip to show
    capsys.readouterr()


def overview_per_block(qtbot, w, clip: int, tmp_path: Path) -> None:
    """A scale per block: each block's thumbnails and its small bar topped at the 99.5th percentile of its heads'
    thumbnails (pooled from the maps by hand), the one bar hidden, the colour-scale box saying so; "fixed 0–1"
    chosen in the box wins, one bar again, drawn as `figure --scale fixed` draws it."""
    ov, scale_box = w.overview, w.controls.scale
    per_map = hand_map_thumbnails(w.session.result, clip)
    for bi, b in enumerate(w.session.blocks):
        top = float(np.percentile(np.concatenate([t.ravel() for i in b.sites for t in per_map[i]]), 99.5))
        assert ov.block_levels[bi] == pytest.approx((0.0, top), rel=1e-6), b.name
        assert all(
            tuple(img.levels) == pytest.approx((0.0, top), rel=1e-6) for k, img in ov.thumbs.items() if k[0] == bi
        )
        bar = ov.block_bars[bi]
        assert bar.levels == pytest.approx((0.0, top), rel=1e-6) and f"{top:.3g}" in [
            t.toPlainText() for t in bar.items[1:]
        ]
        assert bar.label.startswith(f"{b.name}: attention weight (this block's: top at the 99.5th percentile")
        assert f"0–{top:.3g}" in ov.info.text()
    assert not ov.colorbar.isVisible()
    assert scale_box.currentText() == "per block: 99.5th percentile" and "its own scale" in scale_box.toolTip()
    scale_box.setCurrentIndex(scale_box.findData("fixed"))  # the user's choice wins
    assert not w.session.sel.kind_scale and not ov.block_bars and ov.colorbar.isVisible()
    assert all(tuple(img.levels) == pytest.approx((0.0, 1.0)) for img in ov.thumbs.values())
    assert ov.colorbar.axis.labelText == "attention weight (fixed 0–1)" and scale_box.currentText() == "fixed 0–1"
    ours = export(qtbot, w, "overview", tmp_path / "window-fixed.png")
    theirs = tmp_path / "figure-fixed.png"
    assert main(["figure", str(speech_demo()), "--view", "overview", "--scale", "fixed", "--out", str(theirs)]) == 0
    assert theirs.read_bytes() == ours
    # the recipes say the choice (a recipe without the key: the kind's own scale, as the default figure's)
    for recipe in (theirs, tmp_path / "window-fixed.png"):
        assert json.loads(recipe.with_name(recipe.name + ".recipe.json").read_text())["view"]["kind_scale"] is False
    assert "kind_scale" not in json.loads((tmp_path / "figure-overview.png.recipe.json").read_text())["view"]
    scale_box.setCurrentIndex(scale_box.findData("kind"))  # and back
    assert w.session.sel.kind_scale and len(ov.block_bars) == len(w.session.blocks)
    w.select_view("heatmap")  # the token maps' box has no such choice
    assert scale_box.findData("kind") < 0
    w.select_view("overview")


def burst_clip(path: Path, at: float = 1.413) -> Path:
    """2.2 s of a quiet chirp with a short loud burst at ``at`` seconds: the loudness is not at the clip's start."""
    import soundfile as sf

    rate = 16000
    t = np.arange(int(2.2 * rate)) / rate
    x = 0.05 * np.sin(2 * np.pi * (150 * t + 3350 / 4.4 * t**2))
    x += 0.8 * np.exp(-0.5 * ((t - at) / 0.006) ** 2) * np.sin(2 * np.pi * 900 * t)
    sf.write(path, x.astype(np.float32), rate)
    return path


@pytest.mark.slow  # the wav2vec2 export (cached per machine under ~/.cache/attnviz-tests)
def test_an_encoder_alone_opens_on_the_loudest_frame_and_figure_draws_it(
    qtbot, real_window, optimum_export, tmp_path, capsys
):
    """A wav2vec2 (an encoder alone on the sound, no words) opens on Audio regions at the clip's loudest frame, not
    frame 0 (often silence), and `figure` with no flags draws the same bytes; a frame chosen still wins (--query, a
    click).  The loudest frame is counted here from the WAV's samples: each frame hears 400 samples every 320
    (wav2vec2-base's conv stack), its loudness their mean square."""
    import soundfile as sf

    sound = burst_clip(tmp_path / "burst.wav")
    x = sf.read(sound, dtype="float64")[0]
    n = (len(x) - 400) // 320 + 1
    power = np.array([np.mean(x[320 * i : 320 * i + 400] ** 2) for i in range(n)])
    loudest = int(np.argmax(power))
    assert loudest > 0 and 10 * np.log10(power[loudest] / np.sort(power)[-2]) > 3  # the premise: one clear peak
    folder = optimum_export("wav2vec2") / "onnx"
    w = real_window
    open_and_wait(qtbot, w, folder, timeout=120000, audio=str(sound))
    assert shown_tab(w) == "Audio regions"
    v = w.audio_regions
    qtbot.waitUntil(lambda: v.view is not None)
    assert v.view.query_kind == "frame" and v.view.query == loudest
    assert v.view.query_label == f"frame {loudest} ({loudest * 0.02:.2f} s)"
    ours = tmp_path / "window.png"
    w.export_view(ours)
    qtbot.waitUntil(lambda: w.last_export == ours, timeout=60000)
    theirs = tmp_path / "figure.png"
    assert main(["figure", str(folder), "--audio", str(sound), "--out", str(theirs)]) == 0  # no flags
    assert theirs.read_bytes() == ours.read_bytes()
    # a frame given wins: --query in the figure, the session's query (a click, a restored session) in the window
    other = tmp_path / "frame5.png"
    assert main(["figure", str(folder), "--audio", str(sound), "--query", "5", "--out", str(other)]) == 0
    assert other.read_bytes() != ours.read_bytes()
    w.session.select(query=5)
    qtbot.waitUntil(lambda: v.view is not None and v.view.query == 5)
    capsys.readouterr()


def _strip_faces(fig) -> list[np.ndarray]:
    """The text strip's shaded token boxes, panel by panel (a panel ends at its bold word)."""
    ax = fig.axes[0]
    boxes = sorted(((p.get_y(), p.get_x(), p.get_facecolor()) for p in ax.patches), key=lambda b: (b[0], b[1]))
    words = sorted(t.get_position()[1] for t in ax.texts if t.get_fontweight() == "bold")
    panels: list[list] = [[] for _ in words]
    for y, _, face in boxes:
        panels[next(i for i, wy in enumerate(words) if y < wy)].append(face)
    return [np.asarray(p) for p in panels]


@pytest.mark.parametrize(
    "changes",
    [dict(), dict(hide_special=True, keep=0.8), dict(mode="mean", layer_lo=0, layer_hi=-1, hide_special=True, step=2)],
)
def test_the_strip_draws_the_alignment_rows_on_screen(qtbot, real_window, tmp_path, changes):
    """``figure --view strip`` needs no ``--generate`` any more (the window's 32 steps); each of its panels is a row
    of the Alignment view on screen: the word, its weights after hiding special tokens and keeping mass, the same
    colour-bar words."""
    path = demo("translation")
    w = real_window
    open_and_wait(qtbot, w, path, timeout=60000)
    assert main(["figure", str(path), "--view", "strip", "--out", str(tmp_path / "strip.svg")]) == 0
    w.session.select(**changes)
    w.select_view("alignment")
    w.alignment.draw()
    mv, hm = w.alignment.heatmap.mv, w.alignment.heatmap
    from attnviz.figures import FigureStyle, render_figure

    _, sel = w.figure_selection(w.alignment)
    fig = render_figure(w.session.result, "strip", sel, FigureStyle(dpi=40))
    cax = fig.axes[1]
    norm, cmap = cax._colorbar.mappable.norm, cax._colorbar.mappable.cmap
    assert cax.get_xlabel() == hm.colorbar.axis.labelText  # "attention (special tokens removed, ...)"
    words = [t.get_text() for t in fig.axes[0].texts if t.get_fontweight() == "bold"]
    faces = _strip_faces(fig)
    # the screen's rows in order are panels of the strip in order (hiding special tokens drops a special word's row
    # on screen; the strip keeps its panel)
    from attnviz.core.view import strip_view

    panels = strip_view(w.session.result, sel).panels  # what the figure drew: its colours are a 256-step map
    assert [p.word for p in panels] == words
    k = 0
    assert len(mv.q_labels) >= 2
    for i, word in enumerate(mv.q_labels):
        while words[k] != word:
            k += 1
        np.testing.assert_allclose(faces[k], cmap(norm(mv.matrix[i])), atol=1e-6)
        assert panels[k].row == mv.q_pos[i] and panels[k].k_labels == mv.k_labels
        np.testing.assert_allclose(panels[k].weights, mv.matrix[i], rtol=1e-5, atol=1e-7)
        k += 1


def test_the_strip_over_the_decoders_own_tokens_draws_the_head_map_rows(qtbot, real_window):
    """On decoder self-attention ([BOS] is a special key) the strip's panels are the Head map's rows: special tokens
    hidden and each row renormalised, the mass kept, the positions after the word's own cut (causal)."""
    from attnviz.core.view import strip_view
    from attnviz.figures import FigureStyle, render_figure

    w = real_window
    open_and_wait(qtbot, w, demo("translation"), timeout=60000)
    dec = w.session.block_index("decoder", "self")
    w.session.select(block=dec, mode="head", layer=2, head=1, hide_special=True, keep=0.8)
    w.select_view("head")
    mv = w.head_map.heatmap.mv
    assert "[BOS]" not in mv.k_labels and "special tokens hidden" in mv.title
    _, sel = w.figure_selection(w.head_map)
    fig = render_figure(w.session.result, "strip", sel, FigureStyle(dpi=40))
    assert fig.axes[1].get_xlabel() == w.head_map.heatmap.colorbar.axis.labelText
    panels = strip_view(w.session.result, sel).panels
    assert [p.word for p in panels] == [t.get_text() for t in fig.axes[0].texts if t.get_fontweight() == "bold"]
    compared = 0
    for p in panels:
        (i,) = np.nonzero(mv.q_pos == p.row)[0][:1] if p.row in mv.q_pos else (None,)
        if i is None:  # the [BOS] row reads a special token: hidden on screen
            continue
        n = len(p.weights)
        assert p.k_labels == mv.k_labels[:n]
        np.testing.assert_allclose(p.weights, mv.matrix[i][:n], rtol=1e-5, atol=1e-7)
        assert not mv.matrix[i][n:].any()  # the positions after the word were not there yet
        compared += 1
    assert compared >= 5


def test_image_regions_open_on_the_word_figure_draws_without_a_query(qtbot, real_window, tmp_path):
    """The captioning demo with nothing chosen: Image regions open on the word whose attention is most focused (the
    highest drawn weight of any word's map, counted here over the maps the tab draws), and `figure --view image`
    without --query draws that word too, byte for byte (it drew the first word: one view model chooses for both)."""
    path = demo("captioning")
    w = real_window
    open_and_wait(qtbot, w, path, timeout=60000)
    w.select_view("image")
    v = w.image_regions
    peaks = [float(v.patch_map_for(i).max()) for i in range(len(v.queries))]
    assert v.query == int(np.argmax(peaks)) != 0  # the premise: not the first word, where figure used to start
    ours = export(qtbot, w, "image", tmp_path / "window-image.png")
    theirs = tmp_path / "figure-image.png"
    assert main(["figure", str(path), "--view", "image", "--out", str(theirs), "--no-recipe"]) == 0
    assert theirs.read_bytes() == ours
