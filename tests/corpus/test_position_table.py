"""A position table found by what the graph does with it, not by its name: a ``[P, D]`` initializer gathered at
the positions ``0 .. T-1`` of the input's length (the planted model's ``pos_table``) is the model's position limit,
so a longer input is refused in one line naming it (``attnviz open`` / ``extract``) and the flag that fixes it
(``attnviz corpus``: ``--max-tokens N``), where onnxruntime would fail mid-sentence.  Checked against onnxruntime
itself: the limit is exactly where the model stops running.  Tables gathered at anything else (the token ids, a
token-type table's zeros, T5's relative buckets, a fixed range) are not limits: those models run at any length."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from planted import MAX_T, VOCAB

from attnviz.cli import main
from attnviz.runtime import open_model
from attnviz.runtime.limits import find_position_limit

LONG = " ".join(["the cat"] * 20)  # 40 words and [CLS] [SEP]: 42 tokens, past the planted model's 24 positions


def runs(path, t: int) -> bool:
    """Whether onnxruntime runs the model on ``t`` tokens (ids within the planted vocabulary and the small graphs'
    tables) as the graph says: unoptimised, since its optimiser turns a Gather at a Range into a Slice, which clamps
    instead of failing (past the table such a model runs on the table's last rows: garbage, no error)."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    ids = (np.arange(t, dtype=np.int64) % 10)[None]
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    try:
        sess.run(None, {i.name: feeds[i.name] for i in sess.get_inputs()})
    except Exception:  # (onnxruntime's own errors: an index past the table, a broadcast of mismatched lengths)
        return False
    return True


def test_the_planted_pos_table_is_the_limit_where_onnxruntime_stops(planted):
    model, _ = planted
    limit = open_model(model, provider="cpu").position_limit
    # its vocabulary table (12 rows, gathered at the token ids) is not taken for it: the smallest would be 12
    assert (limit.tokens, limit.source) == (MAX_T, "position table pos_table") and len(VOCAB) < MAX_T
    assert runs(model, MAX_T) and not runs(model, MAX_T + 1)


def one_line(capsys, argv) -> str:
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "onnxruntime" not in err and "Non-zero status" not in err, err
    return err


def test_extract_and_open_refuse_a_longer_text_in_one_line(planted, tmp_path, capsys):
    model, _ = planted
    err = one_line(capsys, ["extract", model, "--text", LONG, "--out", tmp_path / "m.npz"])
    assert err == (
        "attnviz: error: 42 tokens; this model's positions stop at 24 (position table pos_table); "
        "use --max-tokens 24 to truncate"
    )
    assert not (tmp_path / "m.npz").exists()
    assert main(["extract", str(model), "--text", LONG, "--max-tokens", "24", "--out", str(tmp_path / "m.npz")]) == 0
    pytest.importorskip("PySide6")
    # the window in a process of its own (an in-process one would leave its application behind for later tests)
    argv = [
        sys.executable,
        "-m",
        "attnviz",
        "open",
        str(model),
        "--text",
        LONG,
        "--screenshot",
        str(tmp_path / "x.png"),
    ]
    r = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    )
    assert r.returncode == 2
    assert r.stderr.strip() == (  # the flag that fixes it, as extract's line names it (it named none: audit25)
        "attnviz: error: 42 tokens; this model's positions stop at 24 (position table pos_table); use --max-tokens 24 "
        "to truncate"
    )


def test_corpus_names_max_tokens_and_runs_with_it(planted, tmp_path, capsys):
    model, _ = planted
    texts = tmp_path / "t.txt"
    texts.write_text("the cat sat\n" + LONG + "\n")
    argv = ["corpus", model, "--texts", texts, "--out", tmp_path / "o", "--no-progress", "--workers", "1"]
    err = one_line(capsys, argv)
    assert "corpus item 1" in err and "positions stop at 24 (position table pos_table)" in err
    assert "use --max-tokens 24 to truncate every item to it" in err
    assert main([str(a) for a in argv] + ["--max-tokens", "24"]) == 0
    assert (tmp_path / "o" / "heads.parquet").exists()


# -- small graphs: input_ids -> indices -> Gather(table [rows, 4]) -> the output ---------------------------------
ROWS = 10


def graph(path, index_nodes: list, rows: int = ROWS, extra: list | None = None):
    """A model gathering ``table`` ([rows, 4]) at ``idx`` (made by ``index_nodes`` from ``input_ids``)."""
    inits = [
        numpy_helper.from_array(np.arange(rows * 4, dtype=np.float32).reshape(rows, 4), "table"),
        *[numpy_helper.from_array(np.array(v, np.int64), n) for n, v in {"zero": 0, "one": 1, "two": 2}.items()],
        numpy_helper.from_array(np.array([0], np.int64), "axes0"),
        *(extra or []),
    ]
    nodes = [
        helper.make_node("Shape", ["input_ids"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["T"], axis=0),
        *index_nodes,
        helper.make_node("Gather", ["table", "idx"], ["out"]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def limit_of(path):
    return find_position_limit({}, onnx.load(str(path)), path)


POSITIONS = {
    "range": ([helper.make_node("Range", ["zero", "T", "one"], ["idx"])], ROWS),
    # positions shaped [1, T] (as position_ids), and cast on the way
    "unsqueezed": (
        [
            helper.make_node("Range", ["zero", "T", "one"], ["r"]),
            helper.make_node("Unsqueeze", ["r", "axes0"], ["u"]),
            helper.make_node("Cast", ["u"], ["idx"], to=TensorProto.INT64),
        ],
        ROWS,
    ),
    # BART's learned positions: + 2 on the way, so two rows fewer fit
    "offset": (
        [
            helper.make_node("Range", ["zero", "T", "one"], ["r"]),
            helper.make_node("Unsqueeze", ["r", "axes0"], ["u"]),
            helper.make_node("Add", ["u", "two"], ["idx"]),
        ],
        ROWS - 2,
    ),
    # a Range starting at 2 (RoBERTa-style positions after the padding index)
    "start": (
        [
            helper.make_node("Add", ["T", "two"], ["end"]),
            helper.make_node("Range", ["two", "end", "one"], ["idx"]),
        ],
        ROWS - 2,
    ),
}


@pytest.mark.parametrize("case", POSITIONS)
def test_a_table_gathered_at_the_lengths_positions_is_the_limit(tmp_path, case):
    nodes, fits = POSITIONS[case]
    path = graph(tmp_path / f"{case}.onnx", nodes)
    assert limit_of(path).tokens == fits and "table" in limit_of(path).source
    assert runs(path, fits) and not runs(path, fits + 1)


NOT_POSITIONS = {
    # a vocabulary embedding: the token ids themselves
    "token ids": [helper.make_node("Identity", ["input_ids"], ["idx"])],
    # a token-type table where the model was given none: zeros of the input's shape (no Range)
    "token types": [
        helper.make_node(
            "ConstantOfShape", ["shape"], ["idx"], value=helper.make_tensor("v", TensorProto.INT64, [1], [0])
        )
    ],
    # T5's relative buckets: the distance between two ranges, clipped to the table
    "relative buckets": [
        helper.make_node("Range", ["zero", "T", "one"], ["r"]),
        helper.make_node("Unsqueeze", ["r", "axes0"], ["row"]),
        helper.make_node("Unsqueeze", ["r", "axes1"], ["col"]),
        helper.make_node("Sub", ["row", "col"], ["d"]),
        helper.make_node("Abs", ["d"], ["a"]),
        helper.make_node("Min", ["a", "nine"], ["idx"]),
    ],
    # a fixed range (not the input's length): the same rows whatever the length
    "fixed range": [helper.make_node("Range", ["zero", "two", "one"], ["idx"])],
    # positions made from the ids' values (a cumulative sum of a mask): not the length's
    "from values": [
        helper.make_node("CumSum", ["input_ids", "one"], ["c"]),
        helper.make_node("Min", ["c", "nine"], ["idx"]),
    ],
}


@pytest.mark.parametrize("case", NOT_POSITIONS)
def test_a_table_gathered_at_anything_else_is_no_limit(tmp_path, case):
    extra = [
        numpy_helper.from_array(np.array([1], np.int64), "axes1"),
        numpy_helper.from_array(np.array(ROWS - 1, np.int64), "nine"),
    ]
    path = graph(tmp_path / "g.onnx", NOT_POSITIONS[case], extra=extra)
    assert limit_of(path) is None
    assert runs(path, 3 * ROWS)  # and rightly: the model runs at any length


def test_a_position_table_read_at_fixed_rows_is_no_limit(tmp_path):
    """A dual encoder's image tower reads its patch positions at fixed rows (a constant ``arange``), its text tower
    at the text's length: CLIP ViT-B/32 has 50 of the first and 77 of the second, and took the 50 for its texts'
    limit, refusing a 60-token caption the model reads.  Only the text's table (here ROWS) limits the text."""
    patches = 5
    inits = [
        numpy_helper.from_array(np.zeros((patches, 4), np.float32), "vision.embeddings.position_embedding.weight"),
        numpy_helper.from_array(np.zeros((ROWS, 4), np.float32), "text.embeddings.position_embedding.weight"),
        numpy_helper.from_array(np.arange(ROWS, dtype=np.int64)[None], "text.position_ids"),
        *[numpy_helper.from_array(np.array(v, np.int64), n) for n, v in {"one": 1}.items()],
        numpy_helper.from_array(np.array([0], np.int64), "start"),
        numpy_helper.from_array(np.array([0], np.int64), "axes0"),
        numpy_helper.from_array(np.array([1], np.int64), "axes1"),
    ]
    fixed = helper.make_tensor("fixed", TensorProto.INT64, [patches], list(range(patches)))
    nodes = [
        helper.make_node("Constant", [], ["patch_ids"], value=fixed),  # as torch.onnx writes a registered buffer
        helper.make_node("Gather", ["vision.embeddings.position_embedding.weight", "patch_ids"], ["vis"]),
        helper.make_node("Shape", ["input_ids"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["T"], axis=0),
        helper.make_node("Unsqueeze", ["T", "axes0"], ["end"]),
        helper.make_node("Slice", ["text.position_ids", "start", "end", "axes1"], ["pos"]),  # CLIP's text tower
        helper.make_node("Gather", ["text.embeddings.position_embedding.weight", "pos"], ["txt"]),
    ]
    g = helper.make_graph(
        nodes,
        "dual",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("vis", "txt")],
        initializer=inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    path = tmp_path / "dual.onnx"
    onnx.save(m, str(path))
    limit = limit_of(path)
    assert limit is not None and (limit.tokens, limit.source) == (
        ROWS,
        "position table text.embeddings.position_embedding.weight",
    ), limit
