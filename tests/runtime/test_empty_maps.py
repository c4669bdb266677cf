"""Inputs of 0 tokens (``--inputs`` whose ``input_ids`` is [1, 0]): onnxruntime runs them and every map is
[1, H, 0, 0]; extract wrote that .npz, which ``figure`` and the window then refuse (core/io.py: "has an empty
axis").  The run itself now refuses, in one line, and writes nothing."""

from pathlib import Path

import numpy as np

from attnviz.cli import main

DEMO = Path(__file__).resolve().parents[2] / "models" / "sequence-classification.onnx"


def test_extract_of_zero_tokens_is_one_line_and_no_file(tmp_path, capsys):
    feeds = tmp_path / "empty.npz"
    np.savez(feeds, input_ids=np.zeros((1, 0), np.int64), attention_mask=np.zeros((1, 0), np.int64))
    out = tmp_path / "maps.npz"
    assert main(["extract", str(DEMO), "--inputs", str(feeds), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnviz: error: the attention at ") and "\n" not in err
    assert "has an empty axis [1, " in err and ", 0, 0] [B, H, Tq, Tk]" in err and "give at least one" in err
    assert not out.exists()


def test_one_token_still_runs(tmp_path, capsys):
    feeds = tmp_path / "one.npz"
    np.savez(feeds, input_ids=np.ones((1, 1), np.int64), attention_mask=np.ones((1, 1), np.int64))
    out = tmp_path / "maps.npz"
    assert main(["extract", str(DEMO), "--inputs", str(feeds), "--out", str(out)]) == 0, capsys.readouterr().err
    shapes = {k: v.shape for k, v in np.load(out).items() if k.startswith("attn_")}
    assert shapes and all(s[2:] == (1, 1) for s in shapes.values())
