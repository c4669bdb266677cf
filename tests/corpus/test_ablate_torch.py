"""Head ablation on exported ONNX files against PyTorch: the same transformers BERT with one head's attention
probabilities multiplied by 0 inside its eager attention (a replacement of transformers' own function, written
here), exported by the legacy exporter (decomposed Softmax: gated on the probabilities) and by the dynamo exporter
at opset 23 with SDPA (an ONNX ``Attention`` op: gated on its output)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from attnviz.runtime import open_model  # noqa: E402
from attnviz.runtime.ablation import Ablation  # noqa: E402
from attnviz.runtime.request import AnalyzeRequest  # noqa: E402


def _torch_ablated(layer: int, head: int) -> np.ndarray:
    """last_hidden_state of hf_models' BERT (same seed, same weights) with head ``head`` of layer ``layer`` × 0."""
    import hf_models
    import transformers.models.bert.modeling_bert as mb

    m, kw, _, _, _ = hf_models.build("bert")
    m.set_attn_implementation("eager")
    target = m.encoder.layer[layer].attention.self
    original = mb.eager_attention_forward

    def ablated(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **_):
        w = torch.matmul(query, key.transpose(2, 3)) * scaling
        if attention_mask is not None:
            w = w + attention_mask
        w = torch.softmax(w, dim=-1)
        if module is target:
            gate = torch.ones(1, w.shape[1], 1, 1)
            gate[0, head] = 0.0
            w = w * gate
        return torch.matmul(w, value).transpose(1, 2).contiguous(), w

    mb.eager_attention_forward = ablated
    try:
        with torch.no_grad():
            return m(**kw).last_hidden_state.numpy()
    finally:
        mb.eager_attention_forward = original


@pytest.mark.parametrize(
    "exporter,attn,opset,gate",
    [
        ("legacy", "eager", 17, "probabilities"),
        pytest.param("dynamo", "sdpa", 23, "output", marks=pytest.mark.slow),
    ],
)
def test_ablating_a_head_equals_pytorch_with_that_head_zeroed(hf_export, exporter, attn, opset, gate):
    path, feeds, _, _ = hf_export("bert", exporter, attn, opset)
    before = path.read_bytes()
    model = open_model(path, provider="cpu")
    sites = list(range(len(model.sites)))
    ab = Ablation(model, sites, "zero", AnalyzeRequest(feeds=feeds))
    assert {g.method for g in ab.gates.values()} == {gate}
    real = feeds["attention_mask"] != 0  # padded rows differ by design between runtimes: the real ones count
    for layer, head in ((0, 1), (1, 3)):
        want = _torch_ablated(layer, head)
        got = ab.run({layer: [head]})
        np.testing.assert_allclose(got[real], want[real], atol=1e-5, rtol=0)
        assert np.abs(got[real] - ab.base[real]).max() > 1e-3  # the head mattered: a real change was compared
    assert path.read_bytes() == before
