"""Export parity for every architecture (tiny preset, random weights) and the metadata round trip."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from attnviz.core import metadata  # noqa: E402
from attnviz.training.config import ModelConfig, preset_configs  # noqa: E402
from attnviz.training.export import build_metadata, check_parity, export, read_config  # noqa: E402
from attnviz.training.model import AttnModel, input_names  # noqa: E402
from attnviz.training.runners import OnnxRunner, TorchRunner  # noqa: E402
from attnviz.training.tasks import Task, get_task  # noqa: E402

ARCHS = {
    "encoder": dict(arch="encoder", vocab_size=12, head="classify", n_classes=3),
    "encoder-series-learned": dict(
        arch="encoder", input_kind="series", head="forecast", horizon=4, positions="learned"
    ),
    "decoder-lm": dict(arch="decoder", vocab_size=12, head="lm"),
    "decoder-series": dict(arch="decoder", input_kind="series", head="forecast", horizon=4, pool="last"),
    "encoder-decoder": dict(arch="encoder-decoder", vocab_size=12, tgt_vocab_size=9, head="lm"),
    "vit": dict(arch="vit", n_classes=4, image_size=16, patch_size=4),
    "image-decoder-vit": dict(arch="image-decoder", image_encoder="vit", vocab_size=9, image_size=16, patch_size=4),
    "image-decoder-cnn": dict(arch="image-decoder", image_encoder="cnn", vocab_size=9, image_size=16, patch_size=4),
}


def _feeds(mc: ModelConfig, b: int, t: int, tt: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    mask = np.ones((b, t), np.int64)
    mask[0, t - 2 :] = 0  # one padded example
    all_feeds = {
        "input_ids": rng.integers(0, mc.vocab_size, (b, t)).astype(np.int64),
        "attention_mask": mask,
        "series": rng.normal(size=(b, t)).astype(np.float32),
        "pixel_values": rng.normal(size=(b, mc.channels, mc.image_size, mc.image_size)).astype(np.float32),
        "decoder_input_ids": rng.integers(0, mc.target_vocab, (b, tt)).astype(np.int64),
    }
    return {k: all_feeds[k] for k in input_names(mc)}


class _ArchTask(Task):
    """A stand-in task so export() can be exercised per architecture without data."""

    name = "synthetic"

    def __init__(self, mc):
        self.mc = mc

    def example_feeds(self, mcfg, tcfg):
        return _feeds(mcfg, 2, 6, 5)

    def metadata(self, mcfg):
        return {"vocab": [f"w{i}" for i in range(mcfg.vocab_size)], "special": {"pad": 0}}


@pytest.mark.parametrize("name", list(ARCHS))
def test_export_parity(name, tmp_path):
    mc, tc = preset_configs("tiny", {**ARCHS[name], "n_layers": 2, "n_dec_layers": 2})
    torch.manual_seed(0)
    model = AttnModel(mc).eval()
    path = tmp_path / "m.onnx"
    res = export(model, _ArchTask(mc), mc, tc, path, metrics={"accuracy": 0.5})
    n_sites = len(model.attention_layout())
    assert res["parity"]["sites"] == n_sites > 0
    assert res["parity"]["logits_max_diff"] < 1e-4 and res["parity"]["attention_max_diff"] < 1e-4
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]  # no temp files left
    g = onnx.load(str(path)).graph
    assert g.output[0].name == "logits"
    assert sum(n.op_type == "Softmax" for n in g.node) == n_sites
    # dynamic axes: another batch size and sequence length still match PyTorch, maps included
    other = _feeds(mc, 3, 9, 7, seed=1)
    assert np.allclose(OnnxRunner(str(path)).logits(other), TorchRunner(model).logits(other), atol=1e-4)
    check_parity(path, model, other)


def test_attention_rows_sum_to_one_and_causal():
    mc, _ = preset_configs("tiny", ARCHS["encoder-decoder"])
    model = AttnModel(mc).eval()
    feeds = _feeds(mc, 2, 6, 5)
    probs = TorchRunner(model).attention(feeds)
    assert [tuple(p.shape) for p in probs] == [(2, 2, 6, 6), (2, 2, 5, 5), (2, 2, 5, 6)]
    for p in probs:
        assert np.allclose(p.sum(-1), 1, atol=1e-5)
    assert np.allclose(np.triu(probs[1][0, 0], 1), 0)  # decoder self-attention is causal
    assert np.allclose(probs[0][0, :, :, -2:], 0)  # padded source keys get no attention
    assert np.allclose(probs[2][0, :, :, -2:], 0)


def test_never_uses_fused_attention(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("fused SDPA hides the probabilities")

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", boom)
    for kw in ARCHS.values():
        mc, _ = preset_configs("tiny", kw)
        AttnModel(mc).eval()(**{k: torch.as_tensor(v) for k, v in _feeds(mc, 2, 6, 5).items()})


def test_metadata_round_trip(tmp_path):
    task = get_task("vit-classification")
    mc, tc = task.configs("tiny")
    model = AttnModel(mc).eval()
    path = tmp_path / "vit.onnx"
    export(model, task, mc, tc, path, metrics={"accuracy": 0.25, "n": 4})
    props = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    meta = metadata.parse(props)
    assert meta == json.loads(json.dumps(build_metadata(task, mc, tc, {"accuracy": 0.25, "n": 4})))
    assert meta["task"] == "vit-classification"
    assert meta["labels"] == ["circle", "square", "triangle", "cross"]
    assert meta["inputs"] == {"pixel_values": "image"}
    assert meta["image"]["grid"] == [mc.grid, mc.grid] and meta["image"]["offset"] == 1
    assert set(meta["inputs"].values()) <= set(metadata.INPUT_ROLES)
    name, mc2, tc2, _ = read_config(path)
    assert (name, mc2, tc2) == ("vit-classification", mc, tc)


@pytest.mark.parametrize("name", ["sequence-classification", "forecasting", "toy-reverse", "toy-caption"])
def test_task_metadata_roles(name, tmp_path):
    task = get_task(name)
    mc, tc = task.configs("tiny")
    meta = build_metadata(task, mc, tc, None)
    assert list(meta["inputs"]) == list(input_names(mc))
    assert set(meta) <= {k[len("attnviz.") :] for k in metadata.dump(meta)}
    if "vocab" in meta:
        assert len(meta["vocab"]) == (
            mc.target_vocab if mc.arch in ("encoder-decoder", "image-decoder") else mc.vocab_size
        )
