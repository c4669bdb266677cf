"""attnviz compare A B: two models' attention head by head on the same input.

References: a model compared with itself (every measure exact: 0 divergence, full agreement); a dynamically
quantized copy (onnxruntime.quantization), whose per-head Jensen–Shannon divergence is recomputed here by hand from
the two runs' maps; a planted change (one head's query weights scaled in the graph) that must be the only head
that moves.
"""

import json

import numpy as np
import onnx
import pyarrow.parquet as pq
import pytest
from onnx import numpy_helper
from onnx_builders import tiny_text_model

from attnviz.cli import main
from attnviz.runtime import open_model

TEXT = "the cat sat on a mat"


def _run(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def _heads(folder):
    return pq.read_table(folder / "heads.parquet").to_pylist()


def _hand_js_bits(p, q):
    """JS(P, Q) = ½ KL(P‖M) + ½ KL(Q‖M), M = (P + Q)/2, in bits; terms with a zero weight left out."""
    out = []
    for pr, qr in zip(p.astype(np.float64), q.astype(np.float64)):
        pr, qr = pr / pr.sum(), qr / qr.sum()
        m = (pr + qr) / 2
        kl_p = sum(x * np.log2(x / y) for x, y in zip(pr, m) if x > 0)
        kl_q = sum(x * np.log2(x / y) for x, y in zip(qr, m) if x > 0)
        out.append(0.5 * kl_p + 0.5 * kl_q)
    return float(np.mean(out))


def test_a_model_against_itself_is_zero_everywhere(tmp_path, capsys):
    a = tiny_text_model(tmp_path / "a.onnx", layers=2, heads=2, d=8)
    rc, out, err = _run(["compare", str(a), str(a), "--text", TEXT, "--out", str(tmp_path / "c")], capsys)
    assert rc == 0, err
    rows = _heads(tmp_path / "c")
    assert [(r["layer"], r["head"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for r in rows:
        assert r["js_divergence"] == 0.0 and r["max_abs_diff"] == 0.0 and r["top1_agreement"] == 1.0
    run = json.loads((tmp_path / "c" / "run.json").read_text())
    assert run["models"]["A"]["sha256"] == run["models"]["B"]["sha256"]
    assert all(o["max_abs_diff"] == 0.0 for o in run["outputs"]) and run["unmatched"] == []
    assert run["input"] == {"text": TEXT}  # the input flags given, and only they
    assert "no head changed" in out  # (cmpaudit26: no zero head listed as "most changed")


def test_quantized_copy_per_head_divergence_equals_a_hand_computation(tmp_path, capsys):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    a = tiny_text_model(tmp_path / "a.onnx", layers=2, heads=2, d=8, seed=3)
    q = tmp_path / "a_int8.onnx"
    quantize_dynamic(str(a), str(q), weight_type=QuantType.QInt8)
    rc, _, err = _run(["compare", str(a), str(q), "--text", TEXT, "--out", str(tmp_path / "c")], capsys)
    assert rc == 0, err
    rows = {(r["stack"], r["kind"], r["layer"], r["head"]): r for r in _heads(tmp_path / "c")}
    ra = open_model(a, provider="cpu").analyze(text=TEXT)
    rb = open_model(q, provider="cpu").analyze(text=TEXT)
    moved = 0
    for s, ma, mb in zip(ra.sites, ra.maps, rb.maps):
        pa, pb = ma.array()[0], mb.array()[0]  # [H, Q, K]
        for h in range(pa.shape[0]):
            r = rows[(s.stack, s.kind, s.layer, h)]
            assert r["js_divergence"] == pytest.approx(_hand_js_bits(pa[h], pb[h]), abs=1e-6)
            assert r["max_abs_diff"] == pytest.approx(float(np.abs(pa[h] - pb[h]).max()), abs=1e-7)
            agree = float(np.mean(pa[h].argmax(-1) == pb[h].argmax(-1)))
            assert r["top1_agreement"] == pytest.approx(agree)
            moved += r["js_divergence"] > 0
    assert moved > 0  # quantization did change something: the check above compared real numbers
    run = json.loads((tmp_path / "c" / "run.json").read_text())
    logits = next(o for o in run["outputs"] if o["name"] == "logits")
    la, lb = ra.outputs["logits"].astype(np.float64), rb.outputs["logits"].astype(np.float64)
    assert logits["max_abs_diff"] == pytest.approx(float(np.abs(la - lb).max()))
    pa_, pb_ = np.exp(la) / np.exp(la).sum(-1, keepdims=True), np.exp(lb) / np.exp(lb).sum(-1, keepdims=True)
    assert logits["kl_bits"] == pytest.approx(float((pa_ * np.log2(pa_ / pb_)).sum(-1).mean()), rel=1e-6, abs=1e-12)


def test_a_planted_change_to_one_head_is_the_head_that_moved(tmp_path, capsys):
    a = tiny_text_model(tmp_path / "a.onnx", layers=2, heads=2, d=8, seed=5)
    m = onnx.load(a)
    w = next(i for i in m.graph.initializer if i.name == "Wq1")
    arr = numpy_helper.to_array(w).copy()
    arr[:, 4:8] *= 4.0  # layer 1, head 1 (heads split the last axis in blocks of d / heads = 4)
    w.CopyFrom(numpy_helper.from_array(arr, "Wq1"))
    b = tmp_path / "b.onnx"
    onnx.save(m, b)
    before = a.read_bytes()
    rc, out, err = _run(["compare", str(a), str(b), "--text", TEXT, "--out", str(tmp_path / "c")], capsys)
    assert rc == 0, err
    rows = _heads(tmp_path / "c")
    top = max(rows, key=lambda r: r["js_divergence"])
    assert (top["layer"], top["head"]) == (1, 1) and top["js_divergence"] > 1e-3
    assert all(r["js_divergence"] == 0.0 for r in rows if (r["layer"], r["head"]) != (1, 1))
    assert "encoder self 1:1" in out.splitlines()[2]  # printed first
    assert a.read_bytes() == before  # the user's file is untouched


def test_sites_only_one_model_has_are_listed_and_the_rest_compared(tmp_path, capsys):
    a = tiny_text_model(tmp_path / "a.onnx", layers=2, heads=2, d=8)
    b = tiny_text_model(tmp_path / "b.onnx", layers=3, heads=2, d=8)
    rc, out, err = _run(["compare", str(a), str(b), "--text", TEXT, "--out", str(tmp_path / "c")], capsys)
    assert rc == 0, err
    assert {r["layer"] for r in _heads(tmp_path / "c")} == {0, 1}
    run = json.loads((tmp_path / "c" / "run.json").read_text())
    assert run["unmatched"] == ["encoder self L2: only in B"] and "not compared: encoder self L2: only in B" in out


def test_different_tokenizations_and_bad_out_are_one_line(tmp_path, capsys):
    from attnviz import AttnvizError
    from attnviz.corpus.compare import compare_results

    a = tiny_text_model(tmp_path / "a.onnx", layers=1, heads=2, d=8)
    m = open_model(a, provider="cpu")
    with pytest.raises(AttnvizError, match=r"token 2 is 'cat' in A and 'dog' in B \(5 and 5 tokens\)"):
        compare_results(m.analyze(text="the cat sat"), m.analyze(text="the dog sat"))
    (tmp_path / "file").write_text("x")
    rc, _, err = _run(["compare", str(a), str(a), "--text", TEXT, "--out", str(tmp_path / "file")], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "is a file" in err
    rc, _, err = _run(["compare", str(a), str(a), "--out", str(tmp_path / "d")], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and not (tmp_path / "d").exists()


def test_most_changed_lines_give_an_int8_copys_small_divergences_in_significant_digits(tmp_path, capsys):
    """The sequence-classification demo against its int8 copy: every head's JS is ~1e-6 bits, and "JS 0.0000" on
    every listed line (four decimals) said nothing moved and ranked heads by digits not shown; each line gives its
    head's JS and |Δ| to 4 significant digits, as heads.parquet holds them (and as the window's status line)."""
    from pathlib import Path

    from onnxruntime.quantization import QuantType, quantize_dynamic

    demo = Path(__file__).resolve().parents[2] / "models" / "sequence-classification.onnx"
    if not demo.exists():
        pytest.skip("no bundled demo in this checkout")
    q = tmp_path / "int8.onnx"
    quantize_dynamic(str(demo), str(q), weight_type=QuantType.QInt8)
    argv = ["compare", str(demo), str(q), "--text", "7 2 9 5 1 8 6 3", "--out", str(tmp_path / "c")]
    rc, out, err = _run(argv, capsys)
    assert rc == 0, err
    rows = {f"{r['stack']} {r['kind']} {r['layer']}:{r['head']}": r for r in _heads(tmp_path / "c")}
    listed = [line.strip() for line in out.splitlines() if line.startswith("  encoder self ")]
    assert listed and all(0 < rows[" ".join(s.split()[:3])]["js_divergence"] < 5e-4 for s in listed)
    for line in listed:
        r = rows[" ".join(line.split()[:3])]
        assert f"JS {r['js_divergence']:.4g}  |Δ| {r['max_abs_diff']:.4g}  " in line, line
