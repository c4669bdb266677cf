"""`attnviz export-hf` on dual encoders (CLIP, SigLIP: both towers, an image and a text in), its parity check
relative to the maps' scale (a correct peaky export passes, another layer's maps do not), and an operator torch
cannot export said in one line."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hf_models  # noqa: E402

from attnviz import AttnvizError  # noqa: E402
from attnviz.cli import main  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402
from attnviz.training import hf_export  # noqa: E402


@pytest.mark.parametrize("arch", hf_models.DUALS)
def test_export_hf_dual_encoder_maps_equal_transformers(tmp_path, capsys, arch):
    src = hf_models.save_hf_folder(arch, tmp_path / "hf")
    assert main(["export-hf", str(src), "--out", str(tmp_path / "onnx")]) == 0
    said = capsys.readouterr().out
    assert "(dual, task zero-shot-image-classification)" in said
    am = open_model(tmp_path / "onnx" / "model.onnx", provider="cpu")
    assert am.meta["task"] == "zero-shot-image-classification" and am.kind == "vision"
    # NEW inputs, not the check's: a batch of two images and two token rows, the second padded
    kw = hf_models.dual_inputs()
    m = transformers.AutoModel.from_pretrained(str(src), attn_implementation="eager").eval()
    ref, labels = hf_models.dual_reference(arch, m, kw)
    res = am.analyze(feeds={i.name: kw[i.name].numpy() for i in am.inputs})
    assert [(s.stack, s.kind, s.layer) for s in res.sites] == labels
    for g, r in zip(res.maps, ref):
        np.testing.assert_allclose(g.array(), r, atol=5e-4)
    # no class names: the classes are the texts (the config's id2label is transformers' LABEL_0/LABEL_1 placeholder,
    # which the sidebar named as this two-text batch's prediction, "LABEL_1 (p = 0.52)")
    from attnviz.core.prediction import prediction

    assert m.config.id2label == {0: "LABEL_0", 1: "LABEL_1"}
    assert "labels" not in am.meta and prediction(res, am.meta) is None
    # the image goes through the folder's preprocessing, with a typed text
    out = tmp_path / "x.npz"
    assert (
        main(
            [
                "extract",
                str(am.path),
                "--image",
                "resources/samples/captioning.png",
                "--text",
                "a cat",
                "--out",
                str(out),
            ]
        )
        == 0
    )


def _peaky_siglip(k: float):
    """SigLIP with its image tower's query weights scaled by ``k``: logits in the hundreds, peaky maps with near
    ties, so fp32's error in a correct export's maps exceeds 1e-4 on some inputs (measured at k=100 over these 8
    inputs: 3.7e-4 and 1.6e-4, the other six below 1e-4)."""
    m = hf_models.build_dual("siglip")
    with torch.no_grad():
        for layer in m.vision_model.encoder.layers:
            layer.self_attn.q_proj.weight.mul_(k)
        m.vision_model.head.attention.in_proj_weight[:32].mul_(k)
    return m


def _inputs(n: int = 8) -> list[dict]:
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        ids = torch.randint(3, 99, (1, 9), generator=g)
        px = torch.randn(1, 3, 32, 32, generator=g)
        out.append({"pixel_values": px, "input_ids": ids, "attention_mask": torch.ones_like(ids)})
    return out


def test_parity_check_is_relative_to_the_maps_scale(tmp_path):
    m = _peaky_siglip(100.0)
    inputs = _inputs()
    path = tmp_path / "peaky.onnx"
    hf_export.export_or_explain(m, inputs[0], "logits_per_image", path)
    worst, _, n = hf_export.check_against_transformers(path, m, inputs)
    assert n == 5
    assert worst > hf_export.ATOL  # a fixed 1e-4 would refuse this correct export
    # the same file checked against a model whose image layers are swapped: every map is another layer's
    swapped = copy.deepcopy(m)
    layers = swapped.vision_model.encoder.layers
    layers[0], layers[1] = layers[1], layers[0]
    with pytest.raises(AttnvizError, match="export check failed: maps differ"):
        hf_export.check_against_transformers(path, swapped, inputs[:1])


def test_excess_is_scaled_by_the_map_peak():
    ref = np.array([[0.9, 0.1], [0.5, 0.5]], np.float32)
    assert hf_export.excess(ref + 5e-4, ref) < 0  # 5e-4 < 1e-4 + 1e-3 * 0.9
    assert hf_export.excess(ref + 2e-3, ref) > 0
    flat = np.full((2, 4), 0.05, np.float32)
    assert hf_export.excess(flat + 2e-4, flat) > 0  # a flat map keeps close to the fixed 1e-4


class _Histogram(torch.nn.Module):
    """A module whose forward calls torch.histc (as Qwen3-MoE's expert routing does), returning ``.logits``."""

    def forward(self, input_ids):
        counts = torch.histc(input_ids.float(), bins=4, min=0, max=8)
        return transformers.modeling_outputs.CausalLMOutput(logits=counts[None, None, :] + input_ids[..., None])


def test_an_operator_torch_cannot_export_is_one_line(tmp_path):
    kw = {"input_ids": torch.tensor([[1, 2, 3]])}
    with pytest.raises(AttnvizError) as e:
        hf_export.export_or_explain(_Histogram(), kw, "logits", tmp_path / "h.onnx")
    msg = str(e.value)
    assert "aten::histc" in msg and "\n" not in msg and "optimum" in msg
    assert not (tmp_path / "h.onnx").exists()
