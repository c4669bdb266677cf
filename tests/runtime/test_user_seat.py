"""Issue 8 item 9, re-audited through the CLI: what a user sees when the image size is unknown and when
onnxruntime cannot load a model."""

import json
import shutil

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx_builders import tiny_text_model

from attnviz.cli import main


@pytest.mark.slow
def test_a_real_vit_export_without_a_declared_size_says_the_flag_first(hf_export, tmp_path, capsys):
    """The random-init ViT export with its height and width made symbolic: the 224 guess fails in onnxruntime
    (the position table is 4x4 + CLS); the line leads with the cause and the flag, then onnxruntime's words."""
    from PIL import Image

    path, *_ = hf_export("vit", "legacy", "eager", 17)
    m = onnx.load(str(path))
    dims = m.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = "height", "width"
    model = tmp_path / "vit.onnx"
    onnx.save(m, str(model))
    img = tmp_path / "x.png"
    Image.fromarray(np.zeros((40, 56, 3), np.uint8)).save(img)
    out = tmp_path / "o.npz"
    assert main(["extract", str(model), "--image", str(img), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "attnviz: error: vit.onnx does not declare its image size and the 224x224 guess failed: give --image-size H W"
    )
    assert not out.exists()
    assert main(["extract", str(model), "--image", str(img), "--image-size", "32", "32", "--out", str(out)]) == 0
    assert np.load(out)["attn_000"].shape == (1, 4, 17, 17)  # 4x4 patches + CLS at the size given


def test_inspect_says_when_onnxruntime_cannot_load_the_model(tmp_path, capsys):
    """inspect still describes the graph, and its first line says that running it will fail and why; extract
    refuses in one line naming the fix."""
    path = tiny_text_model(tmp_path / "m.onnx")
    m = onnx.load(str(path))
    m.graph.node.append(helper.make_node("NoSuchOp", ["logits"], ["extra"], domain="ai.onnx"))
    onnx.save(m, str(path))
    assert main(["inspect", str(path)]) == 0
    io = capsys.readouterr()
    err, out = io.err.splitlines(), io.out.splitlines()
    assert len(err) == 1 and err[0].startswith("attnviz: warning: m.onnx: onnxruntime cannot load this model:")
    assert "NoSuchOp" in err[0] and "re-export it" in err[0]
    assert out[0].startswith("model ") and any(line.startswith("attention sites (2)") for line in out)
    assert main(["inspect", str(path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["probed"] is False and "NoSuchOp" in d["load_error"]
    ok = tmp_path / "ok.onnx"
    shutil.copy(tiny_text_model(tmp_path / "t.onnx"), ok)
    assert main(["inspect", str(ok), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["probed"] is True and "load_error" not in d
    assert main(["extract", str(path), "--text", "the cat", "--out", str(tmp_path / "o.npz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "onnxruntime cannot load" in err[0] and "re-export it" in err[0]
