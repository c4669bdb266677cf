"""Guided alignment (training/guided.py), optimizer groups, alignment labels."""

import numpy as np
import pytest
import torch

from attnviz import AttnvizError
from attnviz.training import guided
from attnviz.training.config import ModelConfig, TrainConfig
from attnviz.training.loop import Trainer, param_groups
from attnviz.training.model import AttnModel, cross_attention_indices
from attnviz.training.tasks import get_task
from attnviz.training.tasks.translation import subword_links


def test_guided_loss_is_the_cross_entropy_against_uniform_link_targets():
    mcfg = ModelConfig(arch="encoder-decoder", n_layers=1, n_dec_layers=2, n_heads=2, d_model=8, vocab_size=10)
    tcfg = TrainConfig(align_weight=1.0, align_heads=[[1, 1]], align_convention="predict")
    rng = np.random.default_rng(0)
    p = rng.random((1, 2, 3, 4)) + 0.1
    p /= p.sum(-1, keepdims=True)
    probs = [torch.zeros(1)] * 5
    probs[cross_attention_indices(mcfg)[1]] = torch.tensor(p)
    labels = np.zeros((1, 3, 4), np.uint8)
    labels[0, 0, [1, 2]] = 1  # row 0 linked to source subwords 1 and 2
    labels[0, 2, 3] = 1  # row 1 unlinked (not supervised), row 2 linked to subword 3
    want = (-(0.5 * np.log(p[0, 1, 0, 1]) + 0.5 * np.log(p[0, 1, 0, 2])) - np.log(p[0, 1, 2, 3])) / 2
    got = guided.loss(probs, torch.tensor(labels), mcfg, tcfg)
    assert float(got) == pytest.approx(want, rel=1e-6)
    # input convention: row t stands for the input token y[t-1], so the labels move down one row
    tcfg.align_convention = "input"
    want_in = -(0.5 * np.log(p[0, 1, 1, 1]) + 0.5 * np.log(p[0, 1, 1, 2]))  # row 2's link falls off the end
    assert float(guided.loss(probs, torch.tensor(labels), mcfg, tcfg)) == pytest.approx(want_in, rel=1e-6)


def test_guided_settings_are_checked():
    with pytest.raises(AttnvizError, match="align_heads"):
        TrainConfig(align_weight=1.0)
    with pytest.raises(AttnvizError, match="align_convention"):
        TrainConfig(align_convention="output")
    enc = ModelConfig(arch="encoder")
    with pytest.raises(AttnvizError, match="encoder-decoder"):
        guided.check(enc, TrainConfig(align_weight=1.0, align_heads=[[0, 0]]))
    ed = ModelConfig(arch="encoder-decoder", n_dec_layers=2, n_heads=4, vocab_size=10)
    with pytest.raises(AttnvizError, match="head 2:0 does not exist"):
        guided.check(ed, TrainConfig(align_weight=1.0, align_heads=[[2, 0]]))


def test_weight_decay_only_on_matrices():
    # nanoGPT's groups: weights and embeddings decay, biases and LayerNorm gains do not
    model = AttnModel(ModelConfig(arch="encoder-decoder", d_model=16, vocab_size=10))
    decay, no_decay = param_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    named = dict(model.named_parameters())
    assert {id(p) for p in decay["params"]} == {id(p) for n, p in named.items() if p.dim() == 2}
    norms = {id(p) for m in model.modules() if isinstance(m, torch.nn.LayerNorm) for p in m.parameters()}
    biases = {id(p) for n, p in named.items() if n.endswith(".bias")}
    assert {id(p) for p in no_decay["params"]} == norms | biases
    assert len(decay["params"]) + len(no_decay["params"]) == len(named)


def test_subword_links_follow_words():
    # words: target subwords [w0, w0, w1, -] x source subwords [s0, s1, s1, -]; gold (src 1 -> tgt 0), (src 0 -> tgt 1)
    grid = subword_links({(1, 0), (0, 1)}, np.array([0, 0, 1, -1]), np.array([0, 1, 1, -1]))
    np.testing.assert_array_equal(grid, [[0, 1, 1, 0], [0, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])


def _declared_aer(weight: float) -> float:
    task = get_task("translation-synthetic")
    mcfg, tcfg = task.configs("tiny")
    tcfg.steps = 60
    tcfg.align_weight, tcfg.align_heads, tcfg.align_convention = weight, [[0, 0]], "input"
    trainer = Trainer(task, mcfg, tcfg)
    for _ in trainer.events():
        pass
    # the same head, read in the same convention, whether or not it was supervised
    return trainer.metrics["aer_input_convention"]["heads"][0][0]


def test_guided_alignment_lowers_aer_on_a_tiny_task():
    without, with_ = _declared_aer(0.0), _declared_aer(1.0)
    assert with_ < without - 0.2, (with_, without)
