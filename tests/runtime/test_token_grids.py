"""Token grids of image models read from the graph (conv / reshape / concat) at the size the image was fed:
strips, non-square grids and no-CLS layouts labelled as they are; CLS only where the graph concatenates one."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

from attnviz.runtime import open_model

D, H = 8, 2


def image_model(path, size, kernel, stride, cls=False, fold_height=False, seed=0):
    """pixel_values [1,3,h,w] -> Conv patches -> tokens (optionally CLS first) -> one self-attention layer."""
    rng = np.random.default_rng(seed)
    kh, kw = kernel
    gh = (size[0] - kh) // stride[0] + 1
    inits = [
        numpy_helper.from_array((rng.standard_normal((D, 3, kh, kw)) * 0.1).astype(np.float32), "patch_w"),
        numpy_helper.from_array(np.array([0, D * gh if fold_height else D, -1], np.int64), "flat"),
        numpy_helper.from_array(np.array([0, 0, H, D // H], np.int64), "bthd"),
        numpy_helper.from_array(np.array(1 / np.sqrt(D // H), np.float32), "scale"),
    ]
    nodes = [
        helper.make_node("Conv", ["pixel_values", "patch_w"], ["feat"], kernel_shape=[kh, kw], strides=list(stride)),
        helper.make_node("Reshape", ["feat", "flat"], ["flat_t"]),
        helper.make_node("Transpose", ["flat_t"], ["tokens"], perm=[0, 2, 1]),
    ]
    dim = D * gh if fold_height else D
    x = "tokens"
    if cls:
        inits.append(numpy_helper.from_array(rng.standard_normal((1, 1, dim)).astype(np.float32), "cls_token"))
        nodes.append(helper.make_node("Concat", ["cls_token", "tokens"], ["seq"], axis=1))
        x = "seq"
    for w in "qk":
        inits.append(numpy_helper.from_array((rng.standard_normal((dim, D)) * 0.5).astype(np.float32), f"W{w}"))
        perm = [0, 2, 3, 1] if w == "k" else [0, 2, 1, 3]
        nodes += [
            helper.make_node("MatMul", [x, f"W{w}"], [f"{w}_l"]),
            helper.make_node("Reshape", [f"{w}_l", "bthd"], [f"{w}_r"]),
            helper.make_node("Transpose", [f"{w}_r"], [f"{w}_t"], perm=perm),
        ]
    inits.append(numpy_helper.from_array((rng.standard_normal((dim, D)) * 0.5).astype(np.float32), "Wv"))
    nodes += [
        helper.make_node("MatMul", [x, "Wv"], ["v_l"]),
        helper.make_node("Reshape", ["v_l", "bthd"], ["v_r"]),
        helper.make_node("Transpose", ["v_r"], ["v_t"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["q_t", "k_t"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
        helper.make_node("Softmax", ["ss"], ["p"], axis=-1, name="encoder/layers.0/Softmax"),
        helper.make_node("MatMul", ["p", "v_t"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "img",
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, [1, 3, *size])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


@pytest.fixture
def picture(tmp_path):
    p = tmp_path / "line.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (40, 150, 3), dtype=np.uint8)).save(p)
    return p


def _analyze(path, picture):
    return open_model(path, provider="cpu").analyze(image=str(picture))


@pytest.mark.parametrize("fold", [False, True], ids=["conv-height-1", "height-folded-into-channels"])
def test_text_line_strip_is_one_row_of_sixteen(tmp_path, picture, fold):
    """A 32x128 text line, stride 8: 1 x 16 column tokens, no CLS (a square guess would say 4 x 4)."""
    kernel = (8, 8) if fold else (32, 8)
    r = _analyze(image_model(tmp_path / "ocr.onnx", (32, 128), kernel, (8, 8), fold_height=fold), picture)
    g = r.patch_grid
    assert (g.rows, g.cols, g.offset) == (1, 16, 0)
    assert r.maps[0].shape[-1] == 16
    assert r.tokens.labels == [f"(0,{c})" for c in range(16)]
    assert not any(r.tokens.special)


def test_non_square_grid_with_a_concatenated_cls(tmp_path, picture):
    r = _analyze(image_model(tmp_path / "wide.onnx", (32, 64), (8, 8), (8, 8), cls=True), picture)
    g = r.patch_grid
    assert (g.rows, g.cols, g.offset) == (4, 8, 1)
    assert r.tokens.labels[0] == "[CLS]" and r.tokens.labels[1] == "(0,0)" and r.tokens.labels[-1] == "(3,7)"
    assert len(r.tokens) == r.maps[0].shape[-1] == 33


def test_no_cls_square_grid_gets_no_invented_tokens(tmp_path, picture):
    """36 + 4 would once have been read as CLS + 3 registers + 6x6; here it is a 5 x 8 grid with nothing in front."""
    r = _analyze(image_model(tmp_path / "grid.onnx", (40, 64), (8, 8), (8, 8)), picture)
    g = r.patch_grid
    assert (g.rows, g.cols, g.offset) == (5, 8, 0)
    assert not any(lbl.startswith("[") for lbl in r.tokens.labels)
