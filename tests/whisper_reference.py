"""transformers' Whisper timestamps as its generate computes them, and a Praat TextGrid, for the word-timestamp
tests (tests/core/test_audio_align.py, tests/runtime/test_whisper_align.py).

``_extract_token_timestamps`` is called as generate calls it: the cross-attentions step by step (the prompt's
rows in the first step, one row a step after), through a stand-in ``self`` holding only the two config values it
reads."""

from types import SimpleNamespace

import numpy as np
import torch
from transformers.models.whisper import generation_whisper as gw


class _Outputs(dict):  # what generate returns: keys ("beam_indices" in out) and attributes
    __getattr__ = dict.__getitem__


def transformers_times(weights, heads, n_prompt, num_frames, median_width=7):
    """transformers' token timestamps of ``weights`` [batch, layers, heads, rows, frames]."""
    w = torch.tensor(np.asarray(weights, np.float32))
    layers, rows = w.shape[1], w.shape[3]
    steps = [tuple(w[:, i, :, :n_prompt] for i in range(layers))]
    steps += [tuple(w[:, i, :, r : r + 1] for i in range(layers)) for r in range(n_prompt, rows)]
    out = _Outputs(cross_attentions=steps, sequences=torch.zeros(w.shape[0], rows + 1, dtype=torch.long))
    me = SimpleNamespace(config=SimpleNamespace(decoder_layers=layers, median_filter_width=median_width))
    return gw.WhisperGenerationMixin._extract_token_timestamps(
        me, out, heads, num_frames=num_frames, num_input_ids=n_prompt
    ).numpy()


TEXTGRID_LONG = '''File type = "ooTextFile"
Object class = "TextGrid"

xmin = 0
xmax = 2.5
tiers? <exists>
size = 2
item []:
    item [1]:
        class = "IntervalTier"
        name = "phones"
        xmin = 0
        xmax = 2.5
        intervals: size = 1
        intervals [1]:
            xmin = 0
            xmax = 2.5
            text = "dh"
    item [2]:
        class = "IntervalTier"
        name = "words"
        xmin = 0
        xmax = 2.5
        intervals: size = 3
        intervals [1]:
            xmin = 0
            xmax = 0.5
            text = ""
        intervals [2]:
            xmin = 0.5
            xmax = 1.25
            text = "say ""hi"""
        intervals [3]:
            xmin = 1.25
            xmax = 2.5
            text = "there"
'''
