"""The window's refusals name its fields (app/fields.py), the command line's its flags (core/setting_words.py):
the same three refusals that tell a user to cut a sound, worded by who asked."""

from __future__ import annotations

import threading

import pytest

from attnviz import AttnvizError
from attnviz.app.fields import WINDOW
from attnviz.core.setting_words import worded
from attnviz.runtime.audio import FeatureSpec
from attnviz.runtime.shorten import Shorten
from attnviz.runtime.waveform import WaveSpec


def refusals() -> list[str]:
    """A 31 s clip to Whisper (a 30 s window) and to wav2vec2 (a 30 s cap), and a memory refusal's cut."""
    out = [str(FeatureSpec().too_long("a.wav", 31.0)), str(WaveSpec().too_long("a.wav", 31.0))]
    return [*out, Shorten("input_values", 16000, "max_seconds", "the clip").said(12.3)]


def test_the_command_line_names_the_flag_and_the_window_the_field():
    whisper, wav2vec2, memory = refusals()
    assert whisper.endswith(": give --max-seconds 30 to keep the first 30 s, or cut the file")
    assert wav2vec2.endswith(": give --max-seconds 30 to keep the first 30 s, or --max-seconds 31 to take it all")
    assert memory == "cut the clip with --max-seconds 12.3"
    with worded(WINDOW):
        whisper, wav2vec2, memory = refusals()
    assert whisper.endswith(": set max seconds to 30 to keep the first 30 s, or cut the file")
    assert wav2vec2.endswith(": set max seconds to 30 to keep the first 30 s, or to 31 to take it all")
    assert memory == "cut the clip by setting max seconds to 12.3"
    assert refusals()[0].endswith("give --max-seconds 30 to keep the first 30 s, or cut the file")  # left: the flag


def test_the_fix_is_the_max_seconds_setting_and_the_window_words_stay_in_their_thread():
    with pytest.raises(AttnvizError) as e:
        raise WaveSpec().too_long("a.wav", 31.0)
    assert e.value.param == "max_seconds"  # the CLI names --max-seconds, the window frames the field
    seen: list[str] = []
    inside, done = threading.Event(), threading.Event()

    def window_worker():
        with worded(WINDOW):
            inside.set()
            done.wait(10)

    t = threading.Thread(target=window_worker)
    t.start()
    assert inside.wait(10)
    seen.append(refusals()[2])  # a command run beside the window's worker, while it is in the window's words
    done.set()
    t.join()
    assert seen == ["cut the clip with --max-seconds 12.3"]


# -- every fix a window's job can name (session 24, fields24) -------------------------------------------------------


def test_every_fix_has_the_windows_words_and_none_names_a_flag():
    from attnviz.app.fields import LABELS, WINDOW_FIXES
    from attnviz.core.setting_words import FIXES

    assert WINDOW_FIXES.keys() == FIXES.keys()  # a fix added for the command line is worded for the window too
    flagged = {k: v for k, v in {**WINDOW_FIXES, **LABELS}.items() if "--" in v}
    assert not flagged


def _said(make) -> str:
    try:
        out = make()
    except AttnvizError as e:
        return str(e)
    return out if isinstance(out, str) else str(out)


def _messages(monkeypatch, big) -> dict[str, object]:
    """Each changed producer, by name: called as a run calls it (the refusal raised, or the note or line made)."""
    from attnviz.app.run_facts import run_fact
    from attnviz.core import audio_view, limits
    from attnviz.runtime import errors, inputs, sample
    from attnviz.runtime.audio_notes import cut_note
    from attnviz.runtime.audio_words import read_gold
    from attnviz.runtime.beam_result import merge_beams
    from attnviz.runtime.limits import PositionLimit
    from attnviz.runtime.request import AnalyzeRequest
    from attnviz.runtime.speech import SpeechPrompt
    from attnviz.runtime.truncation import cut_flag

    monkeypatch.setenv(limits.MEMORY_ENV, "2")  # a cap given, as `--max-memory 2` gives it
    monkeypatch.setenv("ATTNVIZ_MAX_GENERATE", "3")
    arena = "Available memory of {} is smaller than requested bytes of {}"
    return {
        "arena_cap": lambda: errors.ort_message(RuntimeError(arena.format(10**8, 3 * 10**9))),
        "arena_beyond": lambda: errors.ort_message(RuntimeError(arena.format(10**8, 10**19))),
        "estimate_cap": lambda: limits.check_memory(3e9, "m.onnx: running it", hint="use a smaller input"),
        "beams": lambda: AnalyzeRequest(text="x", beams=3),
        "steps_limit": lambda: AnalyzeRequest(text="x", generate=5),
        "no_input": lambda: sample.no_input("not-a-model.onnx"),
        "room": lambda: SpeechPrompt((1, 2, 3), max_positions=4).check_room(3, 5, "whisper"),
        "room_pair": lambda: SpeechPrompt((1, 2, 3, 4, 5), max_positions=4).check_room(5, 2, "whisper"),
        "no_hypothesis": lambda: merge_beams([], []),
        "truncate": lambda: PositionLimit(8, "metadata").message(10),
        "one_image": lambda: inputs.one_image_per_run("vit.onnx", 2),
        "image_std": lambda: inputs.load_image("x.png", inputs.ImageSpec(8, 8, 3, [0.5] * 3, [0.0] * 3, "", "", "")),
        "image_size_meta": lambda: inputs._image_int(0.5, "size"),
        "image_mean_meta": lambda: inputs._image_floats("grey", "mean"),
        "cut_note": lambda: cut_note("a.wav", 31.0, 30.0),
        "cut_flag": lambda: cut_flag(1_000_000),
        "no_audio": audio_view.no_audio,
        "maps_kept": lambda: run_fact("mode", "ondemand")[1],
        "gold_file": lambda: read_gold(big),
    }


# the command line's words, byte for byte as they were before the window named its fields (git show a72ad6b2:...)
CLI = {
    "arena_cap": "it asked for 3.0 GB at once with 0.1 GB of the memory cap left; raise the cap with --max-memory 5 "
    "if this machine has the memory",
    "arena_beyond": "it asked for 1.0e+19 bytes at once, more memory than any machine has; cut the input with "
    "--max-tokens N, or keep the maps per head with --memory ondemand",
    "estimate_cap": "m.onnx: running it needs about 3.0 GB, over the memory cap of 2.0 GB (--max-memory 2); use a "
    "smaller input, or raise the cap with --max-memory 4 (or ATTNVIZ_MAX_MEMORY=4) if this machine has it",
    "beams": "--beams 3 searches a generation; give --generate N too (or drop --beams)",
    "steps_limit": "--generate: 5 steps is over the limit of 3 steps; ask for fewer --generate steps, or raise the "
    "limit with ATTNVIZ_MAX_GENERATE=5",
    "no_input": "no input: give --text T, --image PATH, --audio FILE or --inputs FEEDS.npz",
    "room": "whisper's decoder holds 4 positions; a prompt of 3 tokens and --generate 5 need 7: give --generate 2 or "
    "fewer",
    "room_pair": "whisper's decoder holds 4 positions; a prompt of 5 tokens and --generate 2 need 6: give --generate "
    "0 or fewer (or a shorter --text-pair)",
    "no_hypothesis": "beam search finished no hypothesis; give more --generate steps",
    "truncate": "10 tokens; this model's positions stop at 8 (metadata); use --max-tokens 8 to truncate",
    "one_image": "2 images given and vit.onnx takes one image per run; give one image (--image once)",
    "image_std": "image std [0.0, 0.0, 0.0] contains 0 (every pixel would divide by zero); give a non-zero --image-std",
    "image_size_meta": "the model's image size 0.5 (its metadata or preprocessor_config.json) is not a whole number "
    "in 1..16384; give --image-size or fix the file",
    "image_mean_meta": "the model's image mean grey (its metadata or preprocessor_config.json) is not a list of "
    "numbers per channel; give --image-mean",
    "cut_note": "a.wav: 31.00 s cut to the first 30 s (--max-seconds 30)",
    "cut_flag": "(--max-tokens 1000000)",
    "no_audio": "Audio regions need a speech model run on a sound (a Whisper or wav2vec2 folder with an audio file: "
    "File ▸ Open audio…, or --audio FILE); this result has no audio",
    "gold_file": "--gold file {big}: larger than 16 MB; this is not a --gold file attnviz can use",
}

# ... and the window's: the field as the input panel labels it, or what its user can do there
IN_WINDOW = {
    "arena_cap": "it asked for 3.0 GB at once with 0.1 GB of the memory cap left; raise the memory cap to 5 GB "
    "(start attnviz with ATTNVIZ_MAX_MEMORY=5) if this machine has the memory",
    "arena_beyond": "it asked for 1.0e+19 bytes at once, more memory than any machine has; cut the input by setting "
    "max tokens lower",
    "estimate_cap": "m.onnx: running it needs about 3.0 GB, over the memory cap of 2.0 GB (set when attnviz "
    "started); use a smaller input, or raise the memory cap to 4 GB (start attnviz with ATTNVIZ_MAX_MEMORY=4) if "
    "this machine has it",
    "beams": "beams 3 searches a generation; set generate to 1 or more too (or beams to 1)",
    "steps_limit": "generate: 5 steps is over the limit of 3 steps; set generate lower, or raise the limit with "
    "ATTNVIZ_MAX_GENERATE=5",
    "no_input": "no input: type a text, or choose an image or a sound file",
    "room": "whisper's decoder holds 4 positions; a prompt of 3 tokens and generate 5 need 7: set generate to 2 or "
    "fewer",
    "room_pair": "whisper's decoder holds 4 positions; a prompt of 5 tokens and generate 2 need 6: set generate to 0 "
    "or fewer (or a shorter transcript)",
    "no_hypothesis": "beam search finished no hypothesis; set generate higher",
    "truncate": "10 tokens; this model's positions stop at 8 (metadata); set max tokens to 8 to truncate",
    "one_image": "2 images given and vit.onnx takes one image per run; give one image (one file in the image box)",
    "image_std": "image std [0.0, 0.0, 0.0] contains 0 (every pixel would divide by zero); choose a preset beside "
    "normalise",
    "image_size_meta": "the model's image size 0.5 (its metadata or preprocessor_config.json) is not a whole number "
    "in 1..16384; set the size beside normalise or fix the file",
    "image_mean_meta": "the model's image mean grey (its metadata or preprocessor_config.json) is not a list of "
    "numbers per channel; choose a preset beside normalise",
    "cut_note": "a.wav: 31.00 s cut to the first 30 s (max seconds 30)",
    "cut_flag": "(max tokens 1000000)",
    "no_audio": "Audio regions need a speech model run on a sound (a Whisper or wav2vec2 folder with an audio file: "
    "File ▸ Open audio…); this result has no audio",
    "gold_file": "word times file {big}: larger than 16 MB; this is not a word times file attnviz can use",
}


def test_the_command_line_keeps_its_words_and_the_window_says_its_own(monkeypatch, tmp_path):
    from attnviz.core import audio_gold

    big = tmp_path / "times.tsv"
    with open(big, "wb") as f:  # one byte past the reader's cap (a sparse file: nothing written)
        f.truncate(audio_gold.MAX_BYTES + 1)
    made = _messages(monkeypatch, big)
    for key, want in CLI.items():
        assert _said(made[key]) == want.format(big=big), key
    with worded(WINDOW):
        for key, want in IN_WINDOW.items():
            got = _said(made[key])
            assert got == want.format(big=big), key
            assert "--" not in got, key
    assert _said(made["maps_kept"]) == "per head, recomputed when shown"  # the sidebar's alone: no flag anywhere


def test_the_notes_are_found_in_either_words():
    """The printed notes are picked by their mark; a run in the window marks them with the field's name."""
    from attnviz.runtime.audio_notes import audio_notes, cut_note
    from attnviz.runtime.truncation import cut_flag, cut_notes

    cli = [f"12 tokens truncated to the first 8 {cut_flag(8)}", cut_note("a.wav", 31.0, 30.0), "other"]
    with worded(WINDOW):
        window = [f"12 tokens truncated to the first 8 {cut_flag(8)}", cut_note("a.wav", 31.0, 30.0), "other"]
    assert window[0].endswith("(max tokens 8)") and cli[0].endswith("(--max-tokens 8)")
    for notes in (cli, window):
        assert cut_notes(notes) == [notes[0]] and audio_notes(notes) == [notes[1]]
