"""Export fidelity warnings: config.json says the attention soft-caps its logits or slides a window, and the graph
does not — `inspect`, `extract` and the result's notes say so in one line (hand-built ONNX graphs, onnx.helper)."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from attnviz.cli import main
from attnviz.core.io import load_npz
from attnviz.runtime import open_model

T, D = 8, 4


def attention_graph(path, layers: int = 2, softcap: float | None = None, window: int | None = None):
    """x [B, T, D] -> ``layers`` one-head causal self-attention layers; scores optionally soft-capped
    (cap · tanh(s / cap), as Gemma2's eager attention does) and masked to a sliding window of ``window`` keys
    (key j hidden when j <= i - window, as transformers' sliding-window mask does)."""
    rng = np.random.default_rng(0)
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    hidden = j > i
    if window is not None:
        hidden |= j <= i - window
    inits = [
        numpy_helper.from_array(np.where(hidden, -1e9, 0.0).astype(np.float32)[None, None], "mask"),
        numpy_helper.from_array(np.array(D**-0.5, np.float32), "scale"),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
    ]
    nodes, x = [], "x"
    for layer in range(layers):
        p = f"/model/layers.{layer}/self_attn/"
        for w in "qkv":
            inits.append(numpy_helper.from_array((rng.standard_normal((D, D)) * 2).astype(np.float32), f"W{w}{layer}"))
            nodes.append(helper.make_node("MatMul", [x, f"W{w}{layer}"], [f"{w}{layer}"], name=p + f"{w}_proj"))
            nodes.append(helper.make_node("Unsqueeze", [f"{w}{layer}", "axis1"], [f"{w}{layer}h"], name=p + f"{w}_h"))
        nodes.append(helper.make_node("Transpose", [f"k{layer}h"], [f"kt{layer}"], perm=[0, 1, 3, 2], name=p + "kT"))
        nodes.append(helper.make_node("MatMul", [f"q{layer}h", f"kt{layer}"], [f"s{layer}"], name=p + "MatMul"))
        nodes.append(helper.make_node("Mul", [f"s{layer}", "scale"], [f"ss{layer}"], name=p + "Mul"))
        scores = f"ss{layer}"
        if softcap is not None:
            if layer == 0:
                inits.append(numpy_helper.from_array(np.array(softcap, np.float32), "cap"))
            nodes.append(helper.make_node("Div", [scores, "cap"], [f"sd{layer}"], name=p + "Div"))
            nodes.append(helper.make_node("Tanh", [f"sd{layer}"], [f"st{layer}"], name=p + "Tanh"))
            nodes.append(helper.make_node("Mul", [f"st{layer}", "cap"], [f"sc{layer}"], name=p + "Mul_cap"))
            scores = f"sc{layer}"
        nodes.append(helper.make_node("Add", [scores, "mask"], [f"sm{layer}"], name=p + "Add"))
        nodes.append(helper.make_node("Softmax", [f"sm{layer}"], [f"p{layer}"], axis=-1, name=p + "Softmax"))
        nodes.append(helper.make_node("MatMul", [f"p{layer}", f"v{layer}h"], [f"o{layer}"], name=p + "MatMul_1"))
        nodes.append(helper.make_node("Squeeze", [f"o{layer}", "axis1"], [f"x{layer + 1}"], name=p + "out"))
        x = f"x{layer + 1}"
    graph = helper.make_graph(
        nodes,
        "attn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", T, D])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", T, D])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _model(tmp_path, config: dict | None, **graph):
    folder = tmp_path / "m"
    folder.mkdir()
    path = attention_graph(folder / "model.onnx", **graph)
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    np.savez(tmp_path / "feeds.npz", x=np.random.default_rng(1).standard_normal((1, T, D)).astype(np.float32))
    return path


GEMMA2 = {"model_type": "gemma2", "attn_logit_softcapping": 50.0}


@pytest.mark.parametrize(
    "config, graph, warned",
    [
        (GEMMA2, {}, True),  # the config soft-caps, the graph does not: sdpa's export
        (GEMMA2, {"softcap": 50.0}, False),  # the eager export has its tanh
        ({"model_type": "gemma2", "attn_logit_softcapping": None}, {}, False),  # Gemma3: none
        (None, {}, False),
    ],
)
def test_softcapping_missing_from_the_graph(tmp_path, capsys, config, graph, warned):
    path = _model(tmp_path, config, **graph)
    am = open_model(path, provider="cpu")
    assert bool(am.describe()["fidelity"]) == warned
    assert main(["inspect", str(path)]) == 0
    io = capsys.readouterr()
    lines = [line for line in io.err.splitlines() if line.startswith("attnviz: warning: ")]
    assert "warning" not in io.out  # the report on stdout; the warning beside it, as every command's notes
    assert len(lines) == int(warned)
    if warned:
        assert "attn_logit_softcapping 50" in lines[0] and "2 of 2" in lines[0] and "export-hf" in lines[0]
        assert "differ from the model's eager attention" in lines[0]
    npz = tmp_path / "out.npz"
    assert main(["extract", str(path), "--inputs", str(tmp_path / "feeds.npz"), "--out", str(npz)]) == 0
    printed = [line for line in capsys.readouterr().err.splitlines() if line.startswith("attnviz: warning: ")]
    assert len(printed) == int(warned)
    notes = load_npz(npz).info.get("notes") or []
    assert any("attn_logit_softcapping" in n for n in notes) == warned


@pytest.mark.parametrize(
    "config, graph, warned",
    [
        ({"sliding_window": 3}, {}, True),  # Mistral: every layer windowed, the graph masks causally only
        ({"sliding_window": 3}, {"window": 3}, False),  # the window mask is in the graph
        ({"sliding_window": 3, "layer_types": ["full_attention", "full_attention"]}, {}, False),
        ({"sliding_window": 3, "layer_types": ["sliding_attention", "full_attention"]}, {}, True),  # Gemma2
        ({"sliding_window": 3, "use_sliding_window": False}, {}, False),  # Qwen2 with the window off
        ({"sliding_window": T}, {}, False),  # the input fits in the window
        (None, {}, False),
    ],
)
def test_sliding_window_missing_from_the_graph(tmp_path, capsys, config, graph, warned):
    path = _model(tmp_path, config, **graph)
    npz = tmp_path / "out.npz"
    assert main(["extract", str(path), "--inputs", str(tmp_path / "feeds.npz"), "--out", str(npz)]) == 0
    printed = [line for line in capsys.readouterr().err.splitlines() if line.startswith("attnviz: warning: ")]
    assert len(printed) == int(warned)
    res = load_npz(npz)
    if warned:
        assert "sliding_window 3" in printed[0] and "layer(s) 0" in printed[0] and "export-hf" in printed[0]
        layer_types = (config or {}).get("layer_types")
        assert ("1" in printed[0].split("layer(s)")[1].split(" puts")[0]) == (layer_types is None)
        assert any("sliding_window" in n for n in res.info["notes"])
    # the maps are the graph's, whatever the note says: a window mask leaves nothing beyond the window
    far = np.tril(np.ones((T, T), bool), -3)
    beyond = float((res.maps[0].array()[0, 0] * far).sum())
    assert (beyond == 0.0) == ("window" in graph)


@pytest.mark.parametrize("warned", [True, False])
def test_a_figure_says_it_and_its_recipe_records_it(tmp_path, capsys, warned):
    """``attnviz figure`` of an export that lost the soft-capping: one warning line, and the recipe records it (a
    figure in a paper made from such an export is the export's attention, and its record must say so)."""
    path = _model(tmp_path, GEMMA2, **({} if warned else {"softcap": 50.0}))
    fig = tmp_path / "f.png"
    args = ["figure", str(path), "--inputs", str(tmp_path / "feeds.npz"), "--view", "heatmap", "--dpi", "40"]
    assert main([*args, "--out", str(fig)]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("attnviz: warning: ")]
    assert len(err) == int(warned) and all("attn_logit_softcapping" in line for line in err)
    recipe = json.loads((tmp_path / "f.png.recipe.json").read_text())
    assert bool(recipe["run"].get("fidelity")) == warned
