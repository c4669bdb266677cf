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
