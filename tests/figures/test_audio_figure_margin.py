"""The Audio regions figure of a long clip: a frame's weights over 1,500 frames are small ("0.000667"), and the
curve's top label and its "weight" title both stay on the page (at a fixed 0.55 in margin the title was pushed off
its left edge, half a letter showing)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult, AudioTrack, DenseMap, SiteInfo, TokenAxis
from attnviz.figures.audio import draw_audio
from attnviz.figures.spec import FigureStyle
from attnviz.runtime.audio import frame_labels
from attnviz.runtime.waveform import WaveSpec


def test_a_long_clips_small_weights_keep_their_axis_title_on_the_page():
    spec = WaveSpec()  # wav2vec2-base's conv stack: 20 ms frames
    rate = spec.sampling_rate
    wave = (0.3 * np.sin(2 * np.pi * 300 * np.arange(30 * rate) / rate)).astype(np.float32)
    n = spec.positions(len(wave))
    row = np.full((1, 1, n, n), 1.0 / n, np.float32)  # every frame looks at all of them alike: 1/1499 each
    r = AttentionResult(
        [DenseMap(row)],
        [SiteInfo("encoder", "self", 0, 1, "/e/0", "softmax")],
        tokens=TokenAxis(frame_labels(n, spec), values=spec.levels(wave, n)),
        audio=AudioTrack([wave], spec.display([wave]), rate, spec.hop_length, spec.frame_seconds),
    )
    fig = draw_audio(r, vm.Selection(block=0, mode="head", layer=0, head=0, query=0), FigureStyle())
    fig.canvas.draw()
    curve = fig.axes[-1]
    labels = [t.get_text() for t in curve.get_yticklabels()]
    assert labels == ["0", f"{1.0 / n:.3g}"] and len(labels[1]) >= 8
    renderer = fig.canvas.get_renderer()
    for text in (curve.yaxis.label, *curve.get_yticklabels()):
        box = text.get_window_extent(renderer)
        assert box.x0 >= 0, (text.get_text(), box.x0)  # on the page
    assert curve.yaxis.label.get_text() == "weight"


def test_a_figure_of_the_speech_demo_generates_what_its_decoder_holds(tmp_path):
    """ux29: with no --generate, figure generates 32 steps for an encoder-decoder; the speech demo's decoder holds
    16 positions after nothing but its 4-token forced prompt, so `attnviz figure models/spoken-digits --audio CLIP
    --view audio` was refused ("give --generate 13 or fewer") for a number the user never gave.  The default is cut
    to the room (the window's too); a number the user gives is still refused past it."""
    import json
    from pathlib import Path

    from attnviz.app.rules import default_generate
    from attnviz.cli import main
    from attnviz.runtime import open_model

    demo = Path(__file__).resolve().parents[2] / "models" / "spoken-digits"
    config = json.loads((demo / "config.json").read_text())
    prompt = len(json.loads((demo / "generation_config.json").read_text())["forced_decoder_ids"]) + 1
    room = config["max_target_positions"] - prompt + 1  # the last generated token is never fed back
    out = tmp_path / "a.pdf"
    argv = ["figure", str(demo), "--audio", str(demo / "sample.wav"), "--view", "audio"]
    assert main([*argv, "--out", str(out)]) == 0
    assert json.loads((tmp_path / "a.pdf.recipe.json").read_text())["inputs"]["generate"] == room < 32
    assert main([*argv, "--generate", str(room + 1), "--out", str(tmp_path / "b.pdf")]) == 2
    assert default_generate(open_model(demo)) == room
    assert default_generate(open_model(demo.parent / "translation.onnx")) == 32
