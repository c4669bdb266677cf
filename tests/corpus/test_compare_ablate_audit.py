"""What a researcher meets comparing and ablating real checkpoints (cmpaudit26, on all-MiniLM-L6-v2 and its
quantize_dynamic copy), reproduced on tiny graphs.

- A model against itself, or a change planted in one head: "most changed" lists only heads whose weights moved
  (before, the K first heads in table order were printed as the "most changed" with JS 0 and |Δ| 0).
- A problem in one of the two models (a token id past B's vocabulary) says which model: A or B, and its file.
- Two models whose heads differ at every site: one short line naming the head counts and the fix, not every site.
- ``--heads "encoder self 1:*"``: every head of a layer, as a user asks for "a layer's heads".
"""

import json

import numpy as np
import pyarrow.parquet as pq
from onnx_builders import VOCAB, tiny_text_model
from test_compare import TEXT, _run


def _listed(out: str) -> list[str]:
    return [line.split("  JS")[0].strip() for line in out.splitlines() if line.startswith("  ") and " JS " in line]


def test_a_model_against_itself_lists_no_head_as_changed(tmp_path, capsys):
    a = tiny_text_model(tmp_path / "a.onnx", layers=2, heads=2, d=8)
    rc, out, err = _run(["compare", str(a), str(a), "--text", TEXT, "--out", str(tmp_path / "c")], capsys)
    assert rc == 0, err
    assert _listed(out) == []
    assert "no head changed" in out
    rows = pq.read_table(tmp_path / "c" / "heads.parquet").to_pylist()
    assert len(rows) == 4 and all(r["max_abs_diff"] == 0.0 for r in rows)  # the table still holds every head


def test_only_the_heads_that_moved_are_listed(tmp_path, capsys):
    import onnx
    from onnx import numpy_helper

    a = tiny_text_model(tmp_path / "a.onnx", layers=2, heads=2, d=8, seed=5)
    m = onnx.load(a)
    w = next(i for i in m.graph.initializer if i.name == "Wq1")
    arr = numpy_helper.to_array(w).copy()
    arr[:, 4:8] *= 4.0  # layer 1 head 1 only: the last layer, so no other head's input moves
    w.CopyFrom(numpy_helper.from_array(arr, "Wq1"))
    b = tmp_path / "b.onnx"
    onnx.save(m, b)
    rc, out, err = _run(["compare", str(a), str(b), "--text", TEXT, "--out", str(tmp_path / "c"), "--top", "4"], capsys)
    assert rc == 0, err
    rows = pq.read_table(tmp_path / "c" / "heads.parquet").to_pylist()
    moved = [f"{r['stack']} {r['kind']} {r['layer']}:{r['head']}" for r in rows if r["max_abs_diff"] > 0]
    assert moved == ["encoder self 1:1"]
    assert _listed(out) == moved


def test_a_problem_in_model_b_names_b(tmp_path, capsys):
    a = tiny_text_model(tmp_path / "a.onnx", layers=1, heads=2, d=8)
    b = tiny_text_model(tmp_path / "small_vocab.onnx", layers=1, heads=2, d=8, vocab=VOCAB[:8])
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, input_ids=np.array([[1, 3, 11, 2]], np.int64))  # id 11 is in A's vocabulary, past B's 8
    rc, _, err = _run(["compare", str(a), str(b), "--inputs", str(feeds), "--out", str(tmp_path / "c")], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "model B (small_vocab.onnx)" in err and "out of range" in err
    rc, _, err = _run(["compare", str(b), str(a), "--inputs", str(feeds), "--out", str(tmp_path / "c")], capsys)
    assert rc == 2 and "model A (small_vocab.onnx)" in err


def test_heads_that_differ_at_every_site_are_one_short_line(tmp_path, capsys):
    a = tiny_text_model(tmp_path / "a.onnx", layers=3, heads=2, d=8)
    b = tiny_text_model(tmp_path / "b.onnx", layers=3, heads=4, d=8)
    rc, _, err = _run(["compare", str(a), str(b), "--text", TEXT, "--out", str(tmp_path / "c")], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "2 heads in A, 4 in B" in err and "same architecture" in err
    assert err.count("L1") == 0 and len(err) < 300  # not every site spelled out


def test_a_layer_star_ablates_every_head_of_that_layer(tmp_path, capsys):
    a = tiny_text_model(tmp_path / "a.onnx", layers=2, heads=2, d=8, seed=1)
    star = tmp_path / "star"
    rc, _, err = _run(["ablate", str(a), "--text", TEXT, "--heads", "encoder self 1:*", "--out", str(star)], capsys)
    assert rc == 0, err
    listed = tmp_path / "listed"
    rc, _, err = _run(
        ["ablate", str(a), "--text", TEXT, "--heads", "encoder self 1:0,encoder self 1:1", "--out", str(listed)], capsys
    )
    assert rc == 0, err
    rs = pq.read_table(star / "heads.parquet").to_pylist()
    rl = pq.read_table(listed / "heads.parquet").to_pylist()
    assert [(r["layer"], r["head"]) for r in rs] == [(1, 0), (1, 1)]
    assert rs == rl  # the same joint ablation, named two ways
    assert rs[0]["ablated_together"] == 2 and rs[0]["ablation_max_dlogit"] > 0
    joint = json.loads((star / "run.json").read_text())
    assert joint["joint"]["heads"] == ["encoder self 1:0", "encoder self 1:1"]  # the heads the star stood for


def test_a_corpus_item_past_b_s_positions_names_b(planted, tmp_path, capsys):
    """A reads 24 positions, B (A's position table cut to 16 rows) 16: an item of 20 tokens is B's problem."""
    import onnx
    from onnx import numpy_helper

    a, _ = planted
    m = onnx.load(a)
    t = next(i for i in m.graph.initializer if i.name == "pos_table")
    t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t)[:16].copy(), "pos_table"))
    b = tmp_path / "short.onnx"
    onnx.save(m, b)
    texts = tmp_path / "t.txt"
    texts.write_text("the cat sat\n" + " ".join(["the cat"] * 9) + "\n")  # 5 and 20 tokens
    argv = ["compare", str(a), str(b), "--texts", str(texts), "--out", str(tmp_path / "c"), "--workers", "1"]
    rc, _, err = _run(argv + ["--no-progress"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "model B (short.onnx)" in err and "stop at 16" in err and "--max-tokens 16" in err
    rc, _, err = _run(
        ["compare", str(a), str(b), "--text", texts.read_text().splitlines()[1], "--out", str(tmp_path / "d")], capsys
    )
    assert rc == 2 and "model B (short.onnx)" in err and "stop at 16" in err


def test_a_layer_star_names_its_problems_in_one_line(tmp_path, capsys):
    a = tiny_text_model(tmp_path / "a.onnx", layers=2, heads=2, d=8)
    for spec, said in (("encoder self 5:*", "no site encoder self L5"), ("encoder self 1:x", "'encoder self 2:*'")):
        rc, _, err = _run(["ablate", str(a), "--text", TEXT, "--heads", spec, "--out", str(tmp_path / "o")], capsys)
        assert rc == 2 and len(err.strip().splitlines()) == 1 and said in err, err


def _features_model(path):
    """The tiny LM with its output renamed ``last_hidden_state``: features, as all-MiniLM-L6-v2's export gives."""
    import onnx

    m = onnx.load(tiny_text_model(path, layers=1, heads=2, d=8, classifier=False, seed=2))
    for n in m.graph.node:
        n.output[:] = ["last_hidden_state" if o == "logits" else o for o in n.output]
    m.graph.output[0].name = "last_hidden_state"
    onnx.save(m, path)
    return path


def test_the_ablation_header_names_only_the_measures_printed(tmp_path, capsys):
    feats = _features_model(tmp_path / "feats.onnx")
    rc, out, err = _run(["ablate", str(feats), "--text", TEXT, "--all-heads", "--out", str(tmp_path / "f")], capsys)
    assert rc == 0, err
    header = next(line for line in out.splitlines() if line.startswith("heads that matter most"))
    assert header == "heads that matter most (max |Δlast_hidden_state|):"
    assert pq.read_table(tmp_path / "f" / "heads.parquet").column("ablation_kl").null_count == 2  # no KL to name
    texts = tmp_path / "t.txt"
    texts.write_text("the cat sat\na dog ran home\n")
    argv = ["ablate", str(feats), "--texts", str(texts), "--all-heads", "--out", str(tmp_path / "fc"), "--workers", "1"]
    rc, out, err = _run(argv + ["--no-progress"], capsys)
    assert rc == 0, err
    header = next(line for line in out.splitlines() if line.startswith("heads that matter most"))
    assert "KL" not in header and "loss" not in header and "max |Δlast_hidden_state|" in header
    lm = tiny_text_model(tmp_path / "lm.onnx", layers=1, heads=2, d=8, classifier=False, seed=2)
    rc, out, err = _run(["ablate", str(lm), "--text", TEXT, "--all-heads", "--out", str(tmp_path / "l")], capsys)
    assert rc == 0, err
    assert "heads that matter most (KL(base ‖ ablated), bits; max |Δlogits|):" in out  # logits keep their KL


def test_run_json_gives_a_single_file_no_variant(tmp_path, capsys):
    """A quantize_dynamic copy is one file: run.json said "variant": "full" of it (a folder's choice of files)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    a = tiny_text_model(tmp_path / "a.onnx", layers=1, heads=2, d=8)
    q = tmp_path / "a_int8.onnx"
    quantize_dynamic(str(a), str(q), weight_type=QuantType.QInt8)
    rc, _, err = _run(["compare", str(a), str(q), "--text", TEXT, "--out", str(tmp_path / "c")], capsys)
    assert rc == 0, err
    models = json.loads((tmp_path / "c" / "run.json").read_text())["models"]
    assert [sorted(models[k]) for k in "AB"] == [["path", "sha256"], ["path", "sha256"]]
    assert models["B"]["path"] == str(q)


def test_the_window_s_comparison_says_the_head_counts_in_one_short_line(tmp_path):
    """File ▸ Compare with… (the Qt-free job the window runs): the same short line as the command line."""
    import pytest

    from attnviz import AttnvizError
    from attnviz.app.compare import compare_with
    from attnviz.runtime import open_model
    from attnviz.runtime.request import AnalyzeRequest

    a = open_model(tiny_text_model(tmp_path / "a.onnx", layers=2, heads=2, d=8), provider="cpu")
    b_path = tiny_text_model(tmp_path / "b.onnx", layers=2, heads=4, d=8)
    req = AnalyzeRequest(text=TEXT)
    with pytest.raises(AttnvizError) as e:
        compare_with(open_model(b_path, provider="cpu"), b_path, req, a.analyze_request(req))
    said = str(e.value)
    assert "2 heads in A, 4 in B at all 2 sites" in said and "same architecture" in said and "\n" not in said


def test_the_window_s_status_names_a_deeper_b_s_extra_layer(tmp_path):
    """A B one layer deeper: the status line said "1 sites not compared", naming neither the layer nor why."""
    from attnviz.app.compare import compare_with
    from attnviz.runtime import open_model
    from attnviz.runtime.request import AnalyzeRequest

    a = open_model(tiny_text_model(tmp_path / "a.onnx", layers=2, heads=2, d=8), provider="cpu")
    b_path = tiny_text_model(tmp_path / "b.onnx", layers=3, heads=2, d=8)
    req = AnalyzeRequest(text=TEXT)
    held = compare_with(open_model(b_path, provider="cpu"), b_path, req, a.analyze_request(req))
    assert len(held.comparison.heads) == 4  # A's two layers of two heads compared
    assert held.status().endswith("; not compared: encoder self L2: only in B")


def test_a_joint_corpus_ablation_prints_its_numbers_once(tmp_path, capsys):
    """``--heads 'encoder self 1:*' --texts``: one joint ablation.  Its heads were printed as "heads that matter
    most", each with the same (joint) numbers: a ranking of equals."""
    a = tiny_text_model(tmp_path / "a.onnx", layers=2, heads=2, d=8, seed=1)
    texts = tmp_path / "t.txt"
    texts.write_text("the cat sat\na dog ran home\nthe mat\n")
    argv = ["ablate", str(a), "--texts", str(texts), "--heads", "encoder self 1:*", "--out", str(tmp_path / "j")]
    rc, out, err = _run([*argv, "--workers", "1", "--no-progress"], capsys)
    assert rc == 0, err
    rows = pq.read_table(tmp_path / "j" / "heads.parquet").to_pylist()
    assert len(rows) == 2 and rows[0]["ablation_max_dlogit"] == rows[1]["ablation_max_dlogit"] > 0
    assert "heads that matter most" not in out
    said = [line for line in out.splitlines() if line.startswith("output change, all 2 together")]
    assert len(said) == 1 and f"|Δ| {rows[0]['ablation_max_dlogit']:.4g}" in said[0]


def test_run_json_names_an_encoder_decoder_s_target_tokens(tmp_path, capsys):
    """The translation demo's decoder heads run over the target: run.json named only the source's tokens."""
    from pathlib import Path

    demo = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"
    greek, english = "μακάριοι οἱ πτωχοὶ τῷ πνεύματι", "Blessed are the poor in spirit"
    out = tmp_path / "c"
    argv = ["compare", str(demo), str(demo), "--text", greek, "--text-pair", english, "--out", str(out)]
    rc, _, err = _run(argv, capsys)
    assert rc == 0, err
    run = json.loads((out / "run.json").read_text())
    # the demo's target vocabulary is whole English words, after the decoder's start token
    assert run["key_tokens"] == ["[BOS]", *english.split()]
    assert len(run["tokens"]) == 6  # the source's WordPiece tokens: "πτωχοὶ" is two (πτωχ ##οι)


def test_decoders_that_generate_apart_are_told_the_fix_their_kind_takes(tmp_path, capsys):
    """Two decoder-only models whose greedy words part: the line sent them to --text-pair (an encoder's sentence
    B, which a decoder refuses).  It now gives both generations and the fix a decoder takes, which then runs."""
    from attnviz.runtime import open_model

    a = tiny_text_model(tmp_path / "a.onnx", causal=True, classifier=False, layers=2, heads=2, seed=1)
    b = tiny_text_model(tmp_path / "b.onnx", causal=True, classifier=False, layers=2, heads=2, seed=4)
    words = [open_model(m, provider="cpu").analyze(text=TEXT, generate=3).generated for m in (a, b)]
    assert words[0] != words[1]  # each model alone: the premise, two different generations
    argv = ["compare", str(a), str(b), "--text", TEXT, "--generate", "3", "--out", str(tmp_path / "c")]
    rc, _, err = _run(argv, capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert f"(A: “{' '.join(words[0])}”; B: “{' '.join(words[1])}”)" in err
    assert "--text-pair" not in err and "the prompt and A's (or B's) words as --text, without --generate" in err
    rc, out, err = _run(
        ["compare", str(a), str(b), "--text", f"{TEXT} {' '.join(words[0])}", "--out", str(tmp_path / "d")], capsys
    )
    assert rc == 0, err  # the fix it names runs
