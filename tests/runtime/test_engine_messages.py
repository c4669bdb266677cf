"""Issue 8 item 9: the minor messages — inspect's one-line metadata, a graph onnxruntime refuses, an undeclared image
size, and 'mean of 1 head'."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import tiny_text_model

from attnviz.cli import main


def test_inspect_prints_long_multiline_metadata_on_one_clean_line(tmp_path, capsys):
    path = tiny_text_model(tmp_path / "m.onnx")
    m = onnx.load(str(path))
    long_value = "\n".join(f"line {i} \x1b[31mred\x1b[0m" for i in range(6625))
    m.metadata_props.add(key="config", value=long_value)
    onnx.save(m, str(path))
    assert main(["inspect", str(path), "--no-probe"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.strip().startswith("config"))
    assert "\x1b" not in out and len(out.splitlines()) < 40
    assert line.count("line ") <= 10 and f"({len(long_value)} chars" in line


def test_a_graph_onnxruntime_refuses_is_one_line_and_exit_2(tmp_path, capsys):
    path = tiny_text_model(tmp_path / "m.onnx")
    m = onnx.load(str(path))
    m.graph.node.append(helper.make_node("NoSuchOp", ["logits"], ["extra"], domain="ai.onnx"))
    onnx.save(m, str(path))
    feeds = tmp_path / "f.npz"
    np.savez(feeds, input_ids=np.array([[1, 3, 4, 2]], np.int64))
    assert main(["extract", str(path), "--inputs", str(feeds), "--out", str(tmp_path / "o.npz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("attnviz: error:") and "onnxruntime cannot load" in err[0]


def test_undeclared_image_size_points_to_the_flag(tmp_path, capsys):
    """Symbolic H, W and a 4x4-patch position table: the default 224 fails, and the message names --image-size."""
    D = 8
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal((D, 3, 8, 8)) * 0.1).astype(np.float32), "pw"),
        numpy_helper.from_array(np.array([0, D, -1], np.int64), "flat"),
        numpy_helper.from_array(rng.standard_normal((1, 16, D)).astype(np.float32), "pos"),
        numpy_helper.from_array(rng.standard_normal((D, D)).astype(np.float32), "W"),
    ]
    nodes = [
        helper.make_node("Conv", ["pixel_values", "pw"], ["f"], kernel_shape=[8, 8], strides=[8, 8]),
        helper.make_node("Reshape", ["f", "flat"], ["ft"]),
        helper.make_node("Transpose", ["ft"], ["t"], perm=[0, 2, 1]),
        helper.make_node("Add", ["t", "pos"], ["x"]),
        helper.make_node("MatMul", ["x", "W"], ["q"]),
        helper.make_node("Transpose", ["x"], ["kT"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kT"], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "x"], ["out"]),
    ]
    g = helper.make_graph(
        nodes,
        "vis",
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["b", 3, "h", "w"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "vis.onnx"
    onnx.save(model, str(path))
    from PIL import Image

    img = tmp_path / "i.png"
    Image.fromarray(np.zeros((40, 40, 3), np.uint8)).save(img)
    out = tmp_path / "o.npz"
    assert main(["extract", str(path), "--image", str(img), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--image-size" in err[0]
    assert main(["extract", str(path), "--image", str(img), "--image-size", "32", "32", "--out", str(out)]) == 0


def test_mean_of_one_head_is_singular():
    from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo
    from attnviz.core.view import Selection, compute_map

    r = AttentionResult(
        maps=[DenseMap(np.full((1, 1, 3, 3), 1 / 3, np.float32))],
        sites=[SiteInfo("encoder", "self", 0, 1, "n", "softmax")],
    )
    # the view model's words (screen and figure alike) never count heads: no "1 heads"
    assert compute_map(r, Selection(mode="mean")).title == "encoder self-attention · layer 0 · mean over heads"
