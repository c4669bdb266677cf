"""Audit 17: a model whose external data file was cut short (an interrupted copy or download).  Where the tensors
record no ``length`` (some exporters write none) or the cut falls in a large weight that onnxruntime reads itself,
``extract`` printed onnxruntime's "Deserialize tensor ... GetExtDataFromTensorProto ... out of bounds" with the
advice to re-export the model.  Each tensor's bytes are now checked against its file's size as the model opens:
one line naming the data file, the tensor and the fix (fetch the file again), exit 2.  And several tensors without
a ``length`` in one file (valid: onnxruntime reads each its shape's bytes) opened as onnxruntime reads them, where
onnx's loader read each small one to the end of the file ("raw_data size (222016 bytes) does not match")."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx_builders import tiny_text_model

from attnviz.cli import main
from attnviz.runtime import open_model

IDS = np.array([[1, 3, 4, 5, 2]], np.int64)


def external_copy(src: Path, folder: Path, one_file: bool, lengths: bool) -> Path:
    """``src`` saved with every tensor as external data (one data file, or one a tensor), with or without the
    ``length`` fields."""
    folder.mkdir()
    m = onnx.load(str(src))
    dst = folder / "model.onnx"
    onnx.save(
        m,
        str(dst),
        save_as_external_data=True,
        all_tensors_to_one_file=one_file,
        location="weights.bin",
        size_threshold=0,
    )
    if not lengths:
        m = onnx.load(str(dst), load_external_data=False)
        for t in m.graph.initializer:
            for kv in [kv for kv in t.external_data if kv.key == "length"]:
                t.external_data.remove(kv)
        onnx.save(m, str(dst))
    return dst


def largest_tensor(model_path: Path) -> onnx.TensorProto:
    m = onnx.load(str(model_path), load_external_data=False)
    return max(m.graph.initializer, key=lambda t: int(np.prod(t.dims)))


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    # d=96: its 96x96 weights are over loading.INLINE_LIMIT elements, so onnxruntime, not attnviz, reads them
    return tiny_text_model(tmp_path_factory.mktemp("src") / "model.onnx", d=96, heads=2)


@pytest.mark.parametrize("one_file, lengths", [(False, False), (True, True), (True, False)])
def test_a_truncated_data_file_is_one_line_naming_it(src, tmp_path, capsys, one_file, lengths):
    model = external_copy(src, tmp_path / "m", one_file, lengths)
    want = open_model(src, provider="cpu").run({"input_ids": IDS}, mode="dense").maps[0].array()
    got = open_model(model, provider="cpu").run({"input_ids": IDS}, mode="dense").maps[0].array()
    np.testing.assert_allclose(got, want, atol=1e-6)  # the copy is sound before the cut
    big = largest_tensor(model)
    fields = {e.key: e.value for e in big.external_data}
    data = model.parent / fields["location"]
    os.truncate(data, int(fields.get("offset") or 0) + 100)  # the cut falls inside the largest weight
    digest = hashlib.sha256(data.read_bytes()).hexdigest()
    out = tmp_path / "o.npz"
    rc = main(["extract", str(model), "--text", "the cat sat", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.startswith("attnviz: error:") and "\n" not in err, err
    for w in (data.name, "truncated", "download it again"):
        assert w in err, (w, err)
    assert "Deserialize" not in err and "re-export" not in err, err
    assert not out.exists() and hashlib.sha256(data.read_bytes()).hexdigest() == digest


def _stats_during_load(monkeypatch, model_path: Path) -> dict[str, int]:
    """os.stat calls per file name while the model is loaded (its checks; onnxruntime's own reads are C++)."""
    from attnviz.runtime import loading

    calls: dict[str, int] = {}
    real = os.stat

    def counted(p, *a, **k):
        name = os.path.basename(os.fspath(p))
        calls[name] = calls.get(name, 0) + 1
        return real(p, *a, **k)

    monkeypatch.setattr(os, "stat", counted)
    loading.load_model_and_data(model_path)
    monkeypatch.setattr(os, "stat", real)
    return calls


def test_each_data_file_is_stat_once_however_many_tensors_it_holds(src, tmp_path, monkeypatch):
    model_path = external_copy(src, tmp_path / "one", one_file=True, lengths=True)
    stored = onnx.load(str(model_path), load_external_data=False)
    n = sum(t.data_location == onnx.TensorProto.EXTERNAL for t in stored.graph.initializer)
    assert n >= 10  # every tensor in weights.bin: they cost 4 stats each (a resolve, two is_file, its size)
    assert _stats_during_load(monkeypatch, model_path).get("weights.bin") == 1


def test_a_file_read_by_reference_is_stat_as_often_whatever_its_weights(tmp_path, monkeypatch):
    """A model whose large weights are inline: each is a reference into the model file itself (loading's
    by-reference parse), each checked against the file's size; the stats of the file do not grow with them."""
    counts, refs = [], []
    for layers in (1, 6):
        (tmp_path / f"l{layers}").mkdir()
        path = tiny_text_model(tmp_path / f"l{layers}" / "model.onnx", layers=layers, d=96, heads=2)
        from attnviz.runtime import loading

        model, _, _ = loading.load_model_and_data(path)
        refs.append(sum(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer))
        counts.append(_stats_during_load(monkeypatch, path).get("model.onnx"))
    assert refs[1] >= refs[0] + 10, refs  # many more references into the file
    assert counts[0] == counts[1], (counts, refs)
