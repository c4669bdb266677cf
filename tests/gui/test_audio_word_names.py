"""words24 in Audio regions: a word the transcript holds twice reads with its place on its button ("the (1)",
"the (3)") and in the title and the info line ("query “the” (word 3)"), as Image regions names one; a word held
once reads as it is.  A Whisper-shaped result made here (the forced prompt, then a teacher-forced transcript)."""

from __future__ import annotations

import numpy as np

from attnviz.core import audio_view as av
from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult, AudioTrack, DenseMap, SiteInfo, TokenAxis
from attnviz.runtime.audio import FeatureSpec, encoder_positions, frame_labels, log_mel

RATE = 16000
SPEC = FeatureSpec(chunk_length=1, n_samples=RATE)
PROMPT = ["<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"]
WORDS = ["the", "big", "the"]  # "the" twice


def _speech() -> AttentionResult:
    rng = np.random.default_rng(8)
    n = encoder_positions(SPEC)
    dec = PROMPT + WORDS
    t = len(dec)

    def soft(*shape):
        x = np.exp(rng.normal(0, 2, shape))
        return (x / x.sum(-1, keepdims=True)).astype(np.float32)

    maps, sites = [], []
    for stack, kind, tq, tk in (("encoder", "self", n, n), ("decoder", "self", t, t), ("decoder", "cross", t, n)):
        maps.append(DenseMap(soft(1, 2, tq, tk)))
        sites.append(SiteInfo(stack, kind, 0, 2, f"/{stack}/{kind}/0", "softmax"))
    wave = (0.4 * np.sin(2 * np.pi * 440 * np.arange(int(0.7 * RATE)) / RATE)).astype(np.float32)
    track = AudioTrack([wave], log_mel([wave], SPEC), SPEC.sampling_rate, SPEC.hop_length, SPEC.frame_seconds)
    return AttentionResult(
        maps,
        sites,
        tokens=TokenAxis(frame_labels(n, SPEC)),
        key_tokens=TokenAxis(dec, [True] * 4 + [False] * len(WORDS)),
        audio=track,
        prompt_len=t,
    )


def test_a_word_held_twice_reads_with_its_place_on_the_button_and_in_the_title(qtbot, window):
    r = _speech()
    cross = [b.kind for b in r.blocks()].index("cross")
    # by hand: word k (given at decoder position 4 + k) was chosen at row 3 + k; "the" is words 1 and 3
    v = av.audio_view(r, vm.Selection(block=cross, query=5))
    assert v.words == [("the", 3), ("big", 4), ("the", 5)]
    assert v.title.endswith("query “the” (word 3)")
    assert av.audio_view(r, vm.Selection(block=cross, query=4)).title.endswith("query “big”")
    w = window
    w._show_result(r)
    w.select_view("audio")
    w.session.select(block=cross, query=5)
    view = w.audio_regions
    qtbot.waitUntil(lambda: len(view.word_bar.buttons) == 3, timeout=10000)
    assert [b.text() for b in view.word_bar.buttons] == ["the (1)", "big", "the (3)"]
    assert [b.text() for b in view.word_bar.buttons if b.isChecked()] == ["the (3)"]
    assert view.info.text().startswith("query “the” (word 3) · ")
