"""A speech clip's maps end with the clip (core.view.clip): the bundled Whisper demo pads its 2.3-s sample to a 4-s
window (200 frames of 20 ms), and the Head map, Alignment and Overview thumbnails drew all 200 while Audio regions
drew the clip.  The clip's frame count is worked out here from the WAV's own header (soundfile) and the folder's
preprocessor_config.json (a frame is two mel hops), the numbers from the result's raw maps."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("soundfile")
pytest.importorskip("onnxruntime")

from spoken_demo import DEMO, demo_and_clip

from attnviz.core import view as vm
from attnviz.core.audio_view import audio_view


@pytest.fixture(scope="module")
def demo():
    return demo_and_clip()


def block(result, stack, kind) -> int:
    return next(i for i, b in enumerate(result.blocks()) if (b.stack, b.kind) == (stack, kind))


def test_the_head_map_and_alignment_keep_the_clips_frames_and_their_weights(demo):
    result, clip = demo
    cross = block(result, "decoder", "cross")
    blk = result.blocks()[cross]
    total = blk.result.maps[blk.sites[0]].shape[-1]
    assert (clip, total) == (116, 200)  # the premise: 2.3 s of a 4-s window
    sel = vm.Selection(block=cross, layer=1, head=0)
    mv = vm.compute_map(result, sel)
    raw = np.asarray(blk.layer(1))[0]  # [rows, 200]: the run's own numbers
    np.testing.assert_array_equal(mv.k_pos, np.arange(clip))
    np.testing.assert_array_equal(mv.matrix, raw[:, :clip])  # cut, never renormalised
    note = f"the clip: frames 0–{clip - 1} of {total} (padding cut)"
    assert mv.title.endswith(note) and note in vm.map_notes(result, sel)
    al = vm.alignment_map(result, sel)
    np.testing.assert_array_equal(al.k_pos, np.arange(clip))
    np.testing.assert_array_equal(al.matrix, raw[np.ix_(al.q_pos, np.arange(clip))])
    assert al.title.endswith(note)
    # the whole window, asked for: every frame, no note
    whole = vm.compute_map(result, sel.with_(padding=True))
    np.testing.assert_array_equal(whole.matrix, raw)
    assert "padding" not in whole.title and not vm.clip_cut(result, blk, sel.with_(padding=True))
    assert vm.pads_clip(result, result.blocks())


def test_the_encoders_own_map_is_the_clip_by_the_clip(demo):
    result, clip = demo
    enc = block(result, "encoder", "self")
    mv = vm.compute_map(result, vm.Selection(block=enc, layer=0, head=2))
    raw = np.asarray(result.blocks()[enc].layer(0))[2]
    assert mv.matrix.shape == (clip, clip)
    np.testing.assert_array_equal(mv.matrix, raw[:clip, :clip])
    # the decoder's own tokens are not frames: whole
    dec = block(result, "decoder", "self")
    assert vm.compute_map(result, vm.Selection(block=dec)).matrix.shape == result.blocks()[dec].layer(0).shape[1:]


def test_overview_thumbnails_pool_the_clip_alone(demo):
    """A thumbnail is the head's clip pooled: the padding's frames took 84 of its 200 columns."""
    result, clip = demo
    thumbs = vm.thumbnails(result, vm.Selection(), vm.THUMB, use_cache=False)
    for stack, kind in (("decoder", "cross"), ("encoder", "self")):
        bi = block(result, stack, kind)
        raw = np.asarray(result.blocks()[bi].layer(1))[3]
        want = raw[:, :clip] if kind == "cross" else raw[:clip, :clip]
        np.testing.assert_array_equal(thumbs[(bi, 1, 3)], vm.downsample(want, vm.THUMB))
    whole = vm.thumbnails(result, vm.Selection(padding=True), vm.THUMB, use_cache=False)
    bi = block(result, "decoder", "cross")
    np.testing.assert_array_equal(
        whole[(bi, 1, 3)], vm.downsample(np.asarray(result.blocks()[bi].layer(1))[3], vm.THUMB)
    )


def test_audio_regions_are_unchanged_by_the_cut(demo):
    """Audio regions cut the clip themselves and weigh the padding: the same frames either way."""
    result, clip = demo
    a, b = audio_view(result, vm.Selection()), audio_view(result, vm.Selection(padding=True))
    assert len(a.curve) == len(b.curve) == clip
    np.testing.assert_array_equal(a.curve, b.curve)
    assert a.padding_mass == b.padding_mass and a.padding_mass is not None


def test_a_recipe_without_the_choice_draws_the_whole_window_as_before(demo):
    """A recipe written before the cut (no "padding" key) was drawn on the whole window and draws it again; the
    command line records the choice (False) in a new one."""
    from attnviz.figures.select import resolve
    from attnviz.figures.spec import FigureSpec

    result, _ = demo
    assert resolve(result, FigureSpec(view="alignment")).padding is True
    assert resolve(result, FigureSpec(view="alignment", padding=False)).padding is False
    assert "padding" not in FigureSpec(view="alignment").to_dict()


def test_figure_padding_on_a_model_without_sound_is_refused_in_one_line(tmp_path, capsys):
    from attnviz.cli import main

    demo = DEMO.parent / "translation.onnx"
    if not demo.is_file():
        pytest.skip("models/translation.onnx is not in this checkout")
    assert main(["figure", str(demo), "--padding", "--out", str(tmp_path / "x.pdf")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        err[-1].startswith("attnviz: error: --padding: translation.onnx hears no sound") and "drop --padding" in err[-1]
    )


@pytest.mark.parametrize(
    ("view", "flag", "what"), [("heatmap", "--key-span", "key"), ("alignment", "--key-span", "key")]
)
def test_a_span_in_the_padding_names_padding_as_the_fix(demo, tmp_path, capsys, view, flag, what):
    """A window past the clip's frames lies in the padding the maps cut: the refusal says so and names --padding
    (which then draws it); past the whole window it names both ranges."""
    from attnviz.cli import main

    _, clip = demo
    total = 200  # the demo's 4-s window (the premise checked above)
    out = tmp_path / "x.pdf"
    args = ["figure", str(DEMO), "--view", view, "--out", str(out)]
    assert main([*args, flag, f"{clip + 30}-{clip + 60}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"attnviz: error: {flag} {clip + 30}-{clip + 60} lies in the padding after the clip")
    assert f"{what} positions 0-{clip - 1}, of the model's {total}" in err and "add --padding" in err
    assert main([*args, flag, f"{total + 10}-{total + 20}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"(0-{clip - 1}; 0-{total - 1} with --padding)" in err
    assert main([*args, flag, f"{clip + 30}-{clip + 60}", "--padding"]) == 0 and out.is_file()


def test_a_query_span_in_the_encoders_padding_names_padding(demo, tmp_path, capsys):
    from attnviz.cli import main

    result, clip = demo
    enc = block(result, "encoder", "self")
    args = ["figure", str(DEMO), "--view", "heatmap", "--block", str(enc), "--out", str(tmp_path / "x.pdf")]
    assert main([*args, "--span", f"{clip + 1}-{clip + 9}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"--span {clip + 1}-{clip + 9} lies in the padding after the clip" in err and "--padding" in err
