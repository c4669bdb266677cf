"""runtime/model_summary.py: what a corpus driver reads of a model file, kept between commands.  A summary answers as
the opened model does (kind, roles, sites, inputs, metadata, position limit, tokenizer; after a probe taken over,
too), is found only for the same file bytes, sidecars and code, and opens the model itself for what only it can
answer (its own probe, a session's provider)."""

import json

import onnx
import pytest
from onnx_builders import tiny_text_model

from attnviz.corpus import items as it
from attnviz.corpus.plan import check_model, encode_items, has_mask
from attnviz.runtime import model_summary as ms
from attnviz.runtime import open_model, optcache


def _model(tmp_path, causal, name="m.onnx", seed=0):
    path = tiny_text_model(tmp_path / name, heads=4, d=16, causal=causal, seed=seed)
    it.sha256_model(path)  # as the corpus driver's hash does: a summary is kept only under a known sha256
    return path


def _kept(path):
    ms.keep(path, ms.describe(open_model(str(path), provider="cpu")))
    return ms.kept(path, "cpu", None)


def _described(m):
    return (
        m.kind,
        m.roles,
        [s.to_dict() for s in m.sites],
        [(i.name, i.dtype, list(i.shape)) for i in m.inputs],
        m.meta,
        m.position_limit,
        m.no_attention_reason,
        has_mask(m),
    )


@pytest.mark.parametrize("causal", [False, True])
def test_a_summary_answers_as_the_opened_model_before_and_after_a_probe(tmp_path, cache, causal):
    path = _model(tmp_path, causal)
    summary = _kept(path)
    model = open_model(str(path), provider="cpu")
    assert summary is not None and _described(summary) == _described(model)
    assert check_model(summary) == check_model(model)
    items = [it.Item(0, "the cat sat on the mat"), it.Item(1, "a dog")]
    got, want = encode_items(summary, items), encode_items(model, items)
    assert all((getattr(got, f) == getattr(want, f)).all() for f in ("offsets", "ids", "type_ids", "special"))
    # the probe (a worker's, taken over): the causal map makes the decoder a decoder in both
    assert model.probe()
    assert summary.adopt_probe(model.probe_state())
    assert _described(summary) == _described(model)
    assert summary.kind == ("decoder" if causal else "encoder")
    assert not summary.adopt_probe((True, True, [("encoder", 4)]))  # not these sites: nothing taken


def test_where_no_worker_probed_the_summary_opens_the_model_and_probes_it(tmp_path, cache):
    path = _model(tmp_path, causal=True)
    summary = _kept(path)
    model = open_model(str(path), provider="cpu")
    assert summary.probe() == model.probe()
    assert _described(summary) == _described(model)
    assert summary.provider == model.provider == "CPUExecutionProvider"


def test_another_file_sidecar_or_code_finds_no_summary(tmp_path, cache, monkeypatch):
    path = _model(tmp_path, causal=False)
    assert _kept(path) is not None
    # a sidecar the open reads (config.json labels sites and names special tokens), added or edited
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    assert ms.kept(path, "cpu", None) is None
    assert _kept(path) is not None
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    assert ms.kept(path, "cpu", None) is None
    # other bytes in the file (its sha256 is known again once hashed: the summary kept is the old file's)
    _model(tmp_path, causal=False, seed=1)
    assert ms.kept(path, "cpu", None) is None
    # attnviz's code changed
    assert _kept(path) is not None
    monkeypatch.setattr(optcache, "code_digest", lambda: "0" * 64)
    assert ms.kept(path, "cpu", None) is None


def test_a_file_never_hashed_or_a_damaged_entry_finds_none(tmp_path, cache):
    path = tiny_text_model(tmp_path / "m.onnx", heads=4, d=16)
    ms.keep(path, ms.describe(open_model(str(path), provider="cpu")))  # sha256 unknown: not kept (never hashed for it)
    assert not (cache / ms.KIND).exists() or not any((cache / ms.KIND).iterdir())
    it.sha256_model(path)
    assert _kept(path) is not None
    (entry,) = (cache / ms.KIND).iterdir()
    good = json.loads(entry.read_text())
    for broken in ("{", json.dumps({**good, "format": 0}), json.dumps({**good, "sites": []})):
        entry.write_text(broken)
        assert ms.kept(path, "cpu", None) is None
    entry.write_text(json.dumps({**good, "inputs": [["input_ids", "int64"]]}))
    assert ms.kept(path, "cpu", None) is None


def test_a_model_probed_already_or_with_weights_elsewhere_is_not_kept(tmp_path, cache):
    path = _model(tmp_path, causal=False)
    model = open_model(str(path), provider="cpu")
    model.probe()
    assert ms.describe(model) is None  # its sites as probed, not as opened: a summary describes the model as opened
    # weights in a .data file beside it: the file's sha256 would not name them
    ext = tmp_path / "ext"
    ext.mkdir()
    onnx.save_model(
        onnx.load(str(path)),
        str(ext / "m.onnx"),
        save_as_external_data=True,
        location="m.data",
        size_threshold=0,
        convert_attribute=True,
    )
    assert (ext / "m.data").stat().st_size > 0
    assert ms.describe(open_model(str(ext / "m.onnx"), provider="cpu")) is None
    assert ms.describe(open_model(str(path), provider="cpu")) is not None


def test_a_worker_probe_that_failed_leaves_the_probe_to_the_model_itself(tmp_path, cache):
    """corpus/run.py's fallback (a worker that died probing): the summary opens the model and probes it, as the
    driver's own model did."""
    from concurrent.futures import Future

    from attnviz.corpus.run import _adopt_probe

    path = _model(tmp_path, causal=True)
    summary = _kept(path)
    job: Future = Future()
    job.set_exception(RuntimeError("a worker died"))
    assert _adopt_probe(summary, job) is None
    model = open_model(str(path), provider="cpu")
    assert model.probe()
    assert _described(summary) == _described(model) and summary.kind == "decoder"
