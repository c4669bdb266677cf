"""Attention computed in local blocks (LongT5's local encoder, found by the optimum zoo sweep, session 22): the
Softmax sees ``[B, blocks, H, L, 3L]``, each block of L queries against its own and its two neighbours' keys.
attnviz merged blocks into heads and showed it: LongT5 with 4 heads gave 12 "heads" of 3 queries x 9 keys for 7
tokens, written by extract with exit 0, and corpus stopped with an internal error.  Now both refuse it in one line
(exit 2) and write nothing.  The graph is hand-built (tests/onnx_builders.block_local_model)."""

import pytest
from onnx_builders import block_local_model, no_attention_model, tiny_text_model

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.runtime import open_model

TEXT = "the cat sat on"  # [CLS] + 4 words + [SEP]: 6 tokens, whole blocks of 2 and of 6


@pytest.mark.parametrize("block", [2, 6])
def test_block_local_attention_is_refused_in_one_line(tmp_path, capsys, block):
    """6 tokens in blocks of ``block``, 2 heads: the merged map is [1, 2 * 6 / block, block, 3 * block]; one
    block of 6 (LongT5 with fewer tokens than its block) still has 18 keys for 6 tokens."""
    path = block_local_model(tmp_path / "local.onnx", block=block, heads=2)
    shape = [1, 2 * 6 // block, block, 3 * block]
    with pytest.raises(AttnvizError, match=r"is a \[1, \d+, \d+, \d+\] \[B, H, Tq, Tk\] map for 6 tokens") as e:
        open_model(path).analyze(text=TEXT)
    assert f"is a {shape} [B, H, Tq, Tk] map for 6 tokens" in str(e.value)
    out = tmp_path / "maps.npz"
    capsys.readouterr()
    assert main(["extract", str(path), "--text", TEXT, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnviz: error: local.onnx: the attention at encoder self L0 is a ") and "\n" not in err
    assert "local attention in blocks" in err and not out.exists()


def test_corpus_over_block_local_attention_is_one_line_and_no_folder(tmp_path, capsys):
    path = block_local_model(tmp_path / "local.onnx", block=2, heads=2)
    texts = tmp_path / "t.txt"
    texts.write_text(f"{TEXT}\nthe dog ran home\n")
    out = tmp_path / "corpus"
    capsys.readouterr()
    assert main(["corpus", str(path), "--texts", str(texts), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "is a [2, 6, 2, 6] [B, H, Tq, Tk] map" in err and "local attention in blocks" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "model_type, message",
    [
        ("longformer", "Longformer's sliding-window attention computed in overlapping chunks"),
        ("bert", "no attention found: the graph has 1 Softmax node(s) but none feeds a P·V MatMul"),
    ],
)
def test_no_sites_of_a_chunked_architecture_say_why(tmp_path, capsys, model_type, message):
    """optimum's Longformer export yields no site (its chunked band of probabilities feeds no P·V MatMul of a
    Q·Kᵀ): "may not be a transformer" misled; its folder's config.json model type now names the reason."""
    import json

    path = no_attention_model(tmp_path / "model.onnx")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    assert main(["extract", str(path), "--inputs", str(_x(tmp_path)), "--out", str(tmp_path / "m.npz")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnviz: error: model.onnx: ") and "\n" not in err
    assert message in err


def _x(tmp_path):
    import numpy as np

    f = tmp_path / "x.npz"
    np.savez(f, x=np.ones((1, 4), np.float32))
    return f


@pytest.mark.parametrize("model_type", ["mobilevit", "bert"])
def test_an_unshowable_architecture_with_sites_is_refused_at_open(tmp_path, capsys, model_type):
    """optimum's MobileViT export has Softmax sites (attention across patches per pixel offset, on a batch axis)
    and was refused as Swin-like windows "with no window layout; open ... config.json with model_type swin": now
    its folder's model type says what it is.  The same graph beside a bert config.json runs (the control)."""
    import json

    path = tiny_text_model(tmp_path / "model.onnx")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    out = tmp_path / "m.npz"
    rc = main(["extract", str(path), "--text", "the cat sat", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    if model_type == "bert":
        assert rc == 0 and out.exists(), err
        return
    assert rc == 2 and "\n" not in err and not out.exists()
    assert err.startswith("attnviz: error: model.onnx: MobileViT's attention across patches, once per pixel offset")
