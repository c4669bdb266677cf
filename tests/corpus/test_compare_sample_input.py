"""`attnviz compare A B` with no input falls back to model A's own sample input (``attnviz.sample`` metadata), as
`attnviz figure MODEL` does, and says so in one note line (view28: it refused).  A model without a sample is still
refused in the one line naming what it takes.

Independent check: the comparison on the sample equals the one with the sample's text given by hand (the same
heads file), and a model compared with itself diverges nowhere (JS 0, top-1 agreement 1)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

from attnviz.cli import main
from attnviz.runtime.sample import sample_for_path

ROOT = Path(__file__).resolve().parents[2]
MODELS = {name: ROOT / "models" / f"{name}.onnx" for name in ("sequence-classification", "vit-classification")}
MODELS["spoken-digits"] = ROOT / "models" / "spoken-digits"  # a speech folder: its sample clip (speech30: refused)


@pytest.mark.parametrize(
    "name, key", [("sequence-classification", "text"), ("vit-classification", "image"), ("spoken-digits", "audio")]
)
def test_no_input_compares_on_model_as_sample(tmp_path, capsys, name, key):
    import pyarrow.parquet as pq

    model = MODELS[name]
    if not model.exists():
        pytest.skip(f"demo model {model.name} is not in this checkout")
    if key == "audio":
        pytest.importorskip("soundfile")
    sample = sample_for_path(model).values
    assert key in sample
    capsys.readouterr()
    assert main(["compare", str(model), str(model), "--out", str(tmp_path / "fallback")]) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "sample input" in line]
    said = {"audio": "audio clip, generate 8"}.get(key, key)  # (the speech demo's sample generates its words)
    assert notes == [f"attnviz: note: no input given; using model A's sample input for both models ({said})"], err
    run = json.loads((tmp_path / "fallback" / "run.json").read_text())
    assert run["input"][key] == sample[key]
    assert (
        main(["compare", str(model), str(model), f"--{key}", str(sample[key]), "--out", str(tmp_path / "given")]) == 0
    )
    fallback = pq.read_table(tmp_path / "fallback" / "heads.parquet").to_pylist()
    assert fallback == pq.read_table(tmp_path / "given" / "heads.parquet").to_pylist()
    assert fallback and all(h["js_divergence"] == 0 and h["top1_agreement"] == 1 for h in fallback)


def test_a_model_without_a_sample_is_still_refused_in_one_line(tmp_path, capsys):
    import onnx

    model = MODELS["sequence-classification"]
    if not model.exists():
        pytest.skip(f"demo model {model.name} is not in this checkout")
    m = onnx.load(str(model))
    kept = [p for p in m.metadata_props if "sample" not in p.key]
    del m.metadata_props[:]
    m.metadata_props.extend(kept)
    bare = tmp_path / "bare.onnx"
    onnx.save(m, str(bare))
    for f in model.parent.glob("sequence-classification*.json"):  # its tokenizer, beside it
        shutil.copy(f, tmp_path / f.name.replace("sequence-classification", "bare"))
    assert sample_for_path(bare).values == {}
    capsys.readouterr()
    assert main(["compare", str(bare), str(bare), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no input" in err[0], err
    assert not (tmp_path / "out").exists()
