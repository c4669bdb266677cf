"""The shipped translation and captioning models: self-described, measured, and runnable by the engine."""

from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")

from attnviz.core import metadata

ROOT = Path(__file__).resolve().parents[2]


def _load(name):
    import onnx

    path = ROOT / "models" / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path} not present")
    meta = metadata.parse({p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props})
    assert meta["task"] == name and name in (ROOT / "models" / "README.md").read_text()
    return path, meta


def test_captioning_demo():
    from attnviz.runtime import open_model

    path, meta = _load("captioning")
    m = meta["metrics"]
    assert m["pointing_best_layer"] >= 0.9 and m["exact_match"] >= 0.9
    assert meta["image"]["grid"] == [8, 8]
    sample = str(ROOT / meta["sample"]["image"])
    res = open_model(path, provider="cpu").analyze(image=sample, generate=14)
    assert res.generated[:3] == ["a", "blue", "triangle"] and res.generated[-1] == "<eos>"
    assert res.patch_grid.rows == 8 and [s.kind for s in res.sites].count("cross") == 2


def test_translation_demo():
    from attnviz.runtime import open_model

    path, meta = _load("translation")
    m = meta["metrics"]
    assert len(m["aer"]["heads"]) == 3 and all(len(r) == 4 for r in m["aer"]["heads"])
    assert m["aer_average"] < m["aer_diagonal_baseline"] and m["bleu"] > 5
    assert {"tokenizer", "target_tokenizer"} <= set(meta) and set(meta["vocab"]) == {"source", "target"}
    res = open_model(path, provider="cpu").analyze(text=meta["sample"]["text"], generate=30)
    assert res.generated[0] == "Blessed" and res.generated[-1] == "[EOS]"
    assert [s.kind for s in res.sites].count("cross") == 3
    # self-described aligner (guided alignment): the declared heads come first, in their own convention
    heads, convention = metadata.alignment_heads(meta)
    declared = m["aer_declared"]
    assert convention == declared["convention"] == "input"
    # best first, ranked on the validation split when the run had one (the test split selects nothing)
    ranked_on = ((m.get("validation") or {}).get("metrics") or {}).get("aer_declared") or declared
    assert [list(h) for h in heads] == [h for _, h in sorted(zip(ranked_on["aer"], declared["heads"]))]
    table = m["aer_input_convention"]["heads"]
    others = [v for lay, row in enumerate(table) for h, v in enumerate(row) if [lay, h] not in declared["heads"]]
    assert declared["best"]["aer"] == min(table[lay][h] for lay, h in heads) < min(others)
    # issue 12 asks for <= 0.30 and BLEU >= 10 on the 528 held-out verses; run g3 measured 0.296 / 11.1 at export
    # (models/README.md; `attnviz eval` re-measures the same from the file), below eflomal's 0.335-0.373
    assert declared["best"]["aer"] <= 0.30 and m["bleu"] >= 10
