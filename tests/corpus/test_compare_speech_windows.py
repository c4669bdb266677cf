"""`attnviz compare` of two speech models whose feature extractors pad the clip to windows of different lengths
(the demo's 4 s, the tests' random-init Whisper's 5 s) is refused in words about the windows, not "A and B tokenise
the input differently: token 200 is the end in A and '4.00 s' in B" (a speech model's positions are its encoder's
frames: nothing was tokenised).  B here is the demo's run with its window cut to 3 s by hand (150 frames, 300 mel
frames), so no second export is made."""

from __future__ import annotations

import copy
import dataclasses

import pytest
from spoken_demo import demo_and_clip

from attnviz import AttnvizError
from attnviz.core.attention import TokenAxis
from attnviz.corpus.compare import compare_results


def test_speech_models_with_different_windows_are_refused_naming_the_windows():
    ra, _ = demo_and_clip()
    rb = copy.copy(ra)
    rb.tokens = TokenAxis(ra.tokens.labels[:150])
    rb.audio = dataclasses.replace(ra.audio, features=ra.audio.features[..., :300])
    with pytest.raises(AttnvizError) as e:
        compare_results(ra, rb)
    assert str(e.value) == (
        "A and B hear the clip through windows of different lengths: A's encoder has 200 frames of 20 ms (4.00 s), "
        "B's 150 of 20 ms (3.00 s); compare speech models whose feature extractors share a window (chunk_length)"
    )
    rb.audio = None  # not a speech result's frames: the tokens' words, as before
    with pytest.raises(AttnvizError, match="A and B tokenise the input differently: token 150 is '3.00 s' in A"):
        compare_results(ra, rb)
