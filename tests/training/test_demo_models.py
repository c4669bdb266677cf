"""The shipped demo models: self-described, on target, and openable by the engine with their own sample."""

from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")

from attnviz.core import metadata

ROOT = Path(__file__).resolve().parents[2]
MODELS = {
    "sequence-classification": lambda m: m["accuracy"] >= 0.99,
    "forecasting": lambda m: m["ratio_to_baseline"] <= 0.2,
    "vit-classification": lambda m: m["accuracy"] >= 0.99,
}


@pytest.mark.parametrize("name", list(MODELS))
def test_demo_model(name):
    import onnx

    from attnviz.runtime import open_model

    path = ROOT / "models" / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path} not present")
    assert path.stat().st_size < 5_000_000
    meta = metadata.parse({p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props})
    assert meta["task"] == name
    assert MODELS[name](meta["metrics"]), meta["metrics"]
    assert {"inputs", "config", "sample", "metrics"} <= set(meta)
    assert name in (ROOT / "models" / "README.md").read_text()
    m = open_model(path, provider="cpu")
    sample = dict(meta["sample"])
    if "image" in sample:
        sample["image"] = str(ROOT / sample["image"])
        assert Path(sample["image"]).exists()
    res = m.analyze(**sample)
    assert (
        len(res.maps) == 2 and [s.stack for s in res.sites] == ["decoder" if name == "forecasting" else "encoder"] * 2
    )
    if name == "vit-classification":
        assert res.patch_grid.rows == 8 and res.outputs["logits"].argmax() == meta["labels"].index("triangle")
