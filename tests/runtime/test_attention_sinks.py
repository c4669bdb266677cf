"""Attention sinks (GPT-OSS, found by the optimum zoo sweep, session 22): a learned logit per head joins every row
of scores (Concat), the Softmax runs over T+1 columns and the sink column is sliced off before P·V.  attnviz found
no attention in optimum's GPT-OSS export ("4 Softmax node(s) but none feeds a P·V MatMul"); now the map is the
sliced probabilities, as transformers' eager ``output_attentions`` gives them (the zoo compares that: 2.4e-6).
Checked here on a hand-built graph against numpy."""

import numpy as np
from onnx_builders import sink_model

from attnviz.runtime import open_model


def test_sink_attention_is_found_and_its_map_is_the_sliced_probabilities(tmp_path):
    path, feeds, want = sink_model(tmp_path / "sinks.onnx", seq=5, heads=2)
    r = open_model(path).analyze(feeds=feeds)
    assert len(r.maps) == 1 and r.maps[0].shape == (1, 2, 5, 5)
    got = r.maps[0].array()
    np.testing.assert_allclose(got, want, atol=1e-6)
    sums = got.sum(-1)
    assert (sums < 1 - 1e-3).any() and (sums <= 1 + 1e-6).all()  # the sink's share is not shown as a key
