"""attnviz compare A B --texts FILE: two models head by head over a corpus, through the corpus engine.

References: a model against itself (exactly 0 divergence, full agreement, on padded batches); the measures over
the corpus recomputed by hand (loops, float64) from each model's single-input runs (``analyze(text=...)``, one
item at a time, unpadded) — for a planted change on the padded planted encoder, and for a dynamically quantized
copy; an interrupted run resumed to the same tables; the user's files byte-identical.  Local vs Ray:
test_compare_corpus_ray.py.
"""

import json
from pathlib import Path

import numpy as np
import onnx
import pyarrow.parquet as pq
import pytest
from onnx import numpy_helper
from onnx_builders import tiny_text_model
from planted import corpus_lines

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.corpus.compare_run import CHECKPOINT, CompareCorpusConfig, run_compare_corpus
from attnviz.runtime import open_model


def _cfg(a, b, texts, out, **kw):
    return CompareCorpusConfig(str(a), str(b), str(out), str(texts), progress=False, provider="cpu", **kw)


def _table(folder, name="heads.parquet"):
    return pq.read_table(folder / name).to_pylist()


def _planted_change(src, dst, layer=1, head=1, seed=0):
    """The planted encoder with one head's query weights replaced by small random ones: only that head moves
    (every layer reads the embeddings, so a change does not travel to later layers)."""
    m = onnx.load(src)
    w = next(i for i in m.graph.initializer if i.name == f"Wq{layer}")
    arr = numpy_helper.to_array(w).copy()
    d = arr.shape[0]
    arr[:, head * d : (head + 1) * d] = np.random.default_rng(seed).standard_normal((d, d)).astype(np.float32) * 0.3
    w.CopyFrom(numpy_helper.from_array(arr, w.name))
    onnx.save(m, dst)
    return dst


def _hand_js_rows(p, q):
    """Each row's JS(P, Q) = ½ KL(P‖M) + ½ KL(Q‖M), M = (P + Q)/2, in bits, float64, zero weights left out (the
    textbook form; the code under test uses another)."""
    p, q = p.astype(np.float64), q.astype(np.float64)
    p, q = p / p.sum(-1, keepdims=True), q / q.sum(-1, keepdims=True)
    m = (p + q) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        kl_p = np.where(p > 0, p * np.log2(p / m), 0.0).sum(-1)
        kl_q = np.where(q > 0, q * np.log2(q / m), 0.0).sum(-1)
    return (0.5 * kl_p + 0.5 * kl_q).tolist()


def _by_hand(a, b, texts):
    """Per head (stack, kind, layer, head): JS (bits, mean over every row of every item), largest |Δ|, top-1
    agreement — from each model's single-input run on each item; and per item its mean JS over heads and rows."""
    ma, mb = open_model(a, provider="cpu"), open_model(b, provider="cpu")
    js, diff, agree, per_item = {}, {}, {}, []
    for t in texts:
        ra, rb = ma.analyze(text=t), mb.analyze(text=t)
        item = []
        for s, x, y in zip(ra.sites, ra.maps, rb.maps):
            pa, pb = x.array()[0], y.array()[0]  # [H, Q, K]
            for h in range(pa.shape[0]):
                key = (s.stack, s.kind, s.layer, h)
                rows = _hand_js_rows(pa[h], pb[h])
                js.setdefault(key, []).extend(rows)
                item += rows
                diff[key] = max(diff.get(key, 0.0), float(np.abs(pa[h] - pb[h]).max()))
                agree.setdefault(key, []).extend((pa[h].argmax(-1) == pb[h].argmax(-1)).tolist())
        per_item.append(float(np.mean(item)))
    return {k: (float(np.mean(v)), diff[k], float(np.mean(agree[k]))) for k, v in js.items()}, per_item


def test_a_model_against_itself_is_zero_everywhere_and_the_files_are_untouched(planted, tmp_path, capsys):
    model, texts = planted
    before = model.read_bytes(), texts.read_bytes()
    out = tmp_path / "c"
    rc = main(["compare", str(model), str(model), "--texts", str(texts), "--out", str(out), "--batch-size", "8"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "over 40 items (5 batches)" in captured.out and "no head changed" in captured.out
    rows = _table(out)
    assert len(rows) == 8  # 2 layers × 4 heads
    for r in rows:
        assert (r["js_divergence"], r["max_abs_diff"], r["top1_agreement"]) == (0.0, 0.0, 1.0)
    items = _table(out, "items.parquet")
    assert [i["item"] for i in items] == list(range(40))
    assert all(i["js_divergence"] == 0.0 and i["top1_agreement"] == 1.0 for i in items)
    assert items[3]["text"] == texts.read_text().splitlines()[3]
    run = json.loads((out / "run.json").read_text())
    assert run["models"]["A"]["sha256"] == run["models"]["B"]["sha256"] and run["items"] == 40
    assert all(o["max_abs_diff"] == 0.0 for o in run["outputs"]) and run["unmatched"] == []
    assert not (out / CHECKPOINT).exists()
    assert (model.read_bytes(), texts.read_bytes()) == before


def test_padded_batches_equal_a_hand_computation_from_single_input_runs(planted, tmp_path):
    """The planted encoder has a mask input, so batches of 8 pad their shorter items: padded rows must not count."""
    model, texts = planted
    b = _planted_change(model, tmp_path / "b.onnx")
    s = run_compare_corpus(_cfg(model, b, texts, tmp_path / "c", batch_size=8, max_items=16, workers=1))
    assert s.items == 16
    lines = texts.read_text().splitlines()[:16]
    assert len({len(t.split()) for t in lines}) > 1  # items of several lengths: batches were padded
    want, per_item = _by_hand(model, b, lines)
    rows = _table(tmp_path / "c")
    assert len(rows) == len(want) == 8
    for r in rows:
        js, diff, agree = want[(r["stack"], r["kind"], r["layer"], r["head"])]
        assert r["js_divergence"] == pytest.approx(js, abs=1e-6)
        assert r["max_abs_diff"] == pytest.approx(diff, abs=1e-6)
        assert r["top1_agreement"] == pytest.approx(agree)
    moved = {(r["layer"], r["head"]) for r in rows if r["js_divergence"] > 1e-6}
    assert moved == {(1, 1)}  # the planted change, and nothing else
    items = _table(tmp_path / "c", "items.parquet")
    assert [i["js_divergence"] for i in items] == pytest.approx(per_item, abs=1e-6)


def test_quantized_copy_equals_a_hand_computation_from_single_input_runs(tmp_path):
    """One item a batch: a dynamically quantized model quantizes each activation tensor with one scale over the
    whole batch, so only batches of one reproduce its single-input runs."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    a = tiny_text_model(tmp_path / "a.onnx", layers=2, heads=2, d=8, seed=3)
    q = tmp_path / "a_int8.onnx"
    quantize_dynamic(str(a), str(q), weight_type=QuantType.QInt8)
    lines = corpus_lines(10, seed=2)
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(lines) + "\n")
    run_compare_corpus(_cfg(a, q, texts, tmp_path / "c", batch_size=1, workers=1))
    want, per_item = _by_hand(a, q, lines)
    rows = _table(tmp_path / "c")
    for r in rows:
        js, diff, agree = want[(r["stack"], r["kind"], r["layer"], r["head"])]
        assert r["js_divergence"] == pytest.approx(js, abs=1e-6)
        assert r["max_abs_diff"] == pytest.approx(diff, abs=1e-6)
        assert r["top1_agreement"] == pytest.approx(agree)
    assert sum(r["js_divergence"] > 1e-6 for r in rows) > 0  # quantization moved something: real numbers compared
    items = _table(tmp_path / "c", "items.parquet")
    assert [i["js_divergence"] for i in items] == pytest.approx(per_item, abs=1e-6)
    # the line the command prints names the item that moved most by hand, with its text
    from attnviz.corpus.compare import most_changed_item

    k = int(np.argmax(per_item))
    said = most_changed_item(tmp_path / "c" / "items.parquet")
    assert said.startswith(f"most changed item: #{k} (JS {items[k]['js_divergence']:.4g} bits") and lines[k] in said
    # the classifier's logits: largest |Δ| and mean KL(A ‖ B) over the items, by hand from the single runs
    ma, mq = open_model(a, provider="cpu"), open_model(q, provider="cpu")
    la = np.stack([ma.analyze(text=t).outputs["logits"][0] for t in lines]).astype(np.float64)
    lb = np.stack([mq.analyze(text=t).outputs["logits"][0] for t in lines]).astype(np.float64)
    pa, pb = np.exp(la) / np.exp(la).sum(-1, keepdims=True), np.exp(lb) / np.exp(lb).sum(-1, keepdims=True)
    run = json.loads((tmp_path / "c" / "run.json").read_text())
    logits = next(o for o in run["outputs"] if o["name"] == "logits")
    assert logits["max_abs_diff"] == pytest.approx(float(np.abs(la - lb).max()), abs=1e-6)
    assert logits["kl_bits"] == pytest.approx(float((pa * np.log2(pa / pb)).sum(-1).mean()), rel=1e-5, abs=1e-9)


def test_an_interrupted_run_resumes_to_the_same_tables(planted, tmp_path):
    model, texts = planted
    b = _planted_change(model, tmp_path / "b.onnx", layer=0, head=2, seed=1)
    whole = run_compare_corpus(_cfg(model, b, texts, tmp_path / "whole", batch_size=4, workers=1))
    assert whole.batches == 10

    def stop(done):
        if done >= 12:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_compare_corpus(_cfg(model, b, texts, tmp_path / "cut", batch_size=4, workers=1), on_batch=stop)
    assert (tmp_path / "cut" / CHECKPOINT).exists() and not (tmp_path / "cut" / "heads.parquet").exists()
    s = run_compare_corpus(_cfg(model, b, texts, tmp_path / "cut", batch_size=4, workers=2))
    assert s.resumed_items == 12 and s.items == 40
    assert _table(tmp_path / "cut") == _table(tmp_path / "whole")
    assert _table(tmp_path / "cut", "items.parquet") == _table(tmp_path / "whole", "items.parquet")
    run = json.loads((tmp_path / "cut" / "run.json").read_text())
    assert run["resumed_from_items"] == 12 and run["items_this_run"] == 28
    # another run's checkpoint is refused, not folded into this one
    with pytest.raises(KeyboardInterrupt):
        run_compare_corpus(_cfg(model, b, texts, tmp_path / "other", batch_size=4, workers=1), on_batch=stop)
    with pytest.raises(AttnvizError, match="belongs to another run"):
        run_compare_corpus(_cfg(model, b, texts, tmp_path / "other", batch_size=8, workers=1))


def test_an_output_never_replaces_an_input(planted, tmp_path, capsys):
    model, _ = planted
    d = tmp_path / "d"
    d.mkdir()
    texts = d / "items.parquet"  # a corpus named like a result, in the results folder
    import pyarrow as pa

    pq.write_table(pa.table({"text": corpus_lines(5)}), texts)
    before = texts.read_bytes()
    rc = main(["compare", str(model), str(model), "--texts", str(texts), "--out", str(d), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--out" in err[0] and "items.parquet" in err[0]
    assert texts.read_bytes() == before and sorted(p.name for p in d.iterdir()) == ["items.parquet"]


def test_tokens_that_differ_name_the_first_item_and_other_ids_for_the_same_tokens_are_compared(tmp_path, capsys):
    texts = tmp_path / "c.txt"
    texts.write_text("the dog ran home\nthe cat sat on a mat\n")
    a = tiny_text_model(tmp_path / "a.onnx", layers=1, heads=2, d=8)
    m = onnx.load(a)
    special = next(p for p in m.metadata_props if p.key == "attnviz.special")
    special.value = json.dumps({"pad": 0})  # B adds no [CLS] / [SEP]
    onnx.save(m, tmp_path / "b.onnx")
    rc = main(["compare", str(a), str(tmp_path / "b.onnx"), "--texts", str(texts), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and not (tmp_path / "o").exists()
    assert (
        "A and B tokenise corpus item 0 'the dog ran home' differently: token 0 is '[CLS]' in A and 'the' in B"
        in (err[0])
    )
    # the same words at other places in B's vocabulary: B is fed its own ids, so a model against its copy with the
    # vocabulary (and the embedding rows) permuted is the same model
    perm = [0, 1, 2, 3, 9, 5, 6, 7, 8, 4, 10, 11]  # 'cat' and 'dog' swap places
    m = onnx.load(a)
    emb = next(i for i in m.graph.initializer if i.name == "emb")
    emb.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(emb)[perm], "emb"))
    vocab = next(p for p in m.metadata_props if p.key == "attnviz.vocab")
    vocab.value = json.dumps([json.loads(vocab.value)[i] for i in perm])
    onnx.save(m, tmp_path / "b2.onnx")
    rc = main(["compare", str(a), str(tmp_path / "b2.onnx"), "--texts", str(texts), "--out", str(tmp_path / "o2")])
    assert rc == 0, capsys.readouterr().err
    assert all(r["js_divergence"] == 0.0 and r["top1_agreement"] == 1.0 for r in _table(tmp_path / "o2"))


def test_flags_of_the_other_form_are_refused_in_one_line(planted, tmp_path, capsys):
    model, texts = planted
    for argv in (
        ["--texts", str(texts), "--text", "the cat"],
        ["--text", "the cat", "--batch-size", "4"],
        ["--text", "the cat", "--engine", "ray"],
    ):
        rc = main(["compare", str(model), str(model), *argv, "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and not (tmp_path / "o").exists(), err


TRANSLATION = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"


def test_encoder_decoder_pairs_teacher_forced_equal_a_hand_computation(bible, tmp_path, capsys):
    """The translation demo and its quantized copy on (source, target) pairs: encoder self rows count source
    tokens, decoder self and cross rows target tokens, as ``analyze(text=src, text_pair=tgt)`` shows them."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    q = tmp_path / "tr_int8.onnx"
    quantize_dynamic(str(TRANSLATION), str(q), weight_type=QuantType.QInt8)
    recs = [json.loads(line) for line in bible.read_text().splitlines()][:6]
    s = run_compare_corpus(_cfg(TRANSLATION, q, bible, tmp_path / "c", pair_column="en", batch_size=1, max_items=6))
    assert s.items == 6
    ma, mq = open_model(TRANSLATION, provider="cpu"), open_model(q, provider="cpu")
    want: dict = {}
    for r in recs:
        ra, rb = ma.analyze(text=r["text"], text_pair=r["en"]), mq.analyze(text=r["text"], text_pair=r["en"])
        for site, x, y in zip(ra.sites, ra.maps, rb.maps):
            pa, pb = x.array()[0], y.array()[0]
            for h in range(pa.shape[0]):
                want.setdefault((site.stack, site.kind, site.layer, h), []).extend(_hand_js_rows(pa[h], pb[h]))
    rows = _table(tmp_path / "c")
    assert {r["kind"] for r in rows} == {"self", "cross"} and len(rows) == len(want) == 36
    for r in rows:
        assert r["js_divergence"] == pytest.approx(
            np.mean(want[(r["stack"], r["kind"], r["layer"], r["head"])]), abs=1e-6
        )
    assert max(r["js_divergence"] for r in rows) > 1e-5
    # generation would give each model its own decoder rows: refused, with the fix
    rc = main(["compare", str(TRANSLATION), str(q), "--texts", str(bible), "--out", str(tmp_path / "g")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--text-pair-column" in err[0] and not (tmp_path / "g").exists()
