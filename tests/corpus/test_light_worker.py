"""A second command's corpus worker reads its model and statistics session back from the cache without importing
onnx (runtime/light_model.py), gives the partials of a worker that opened the model bit for bit, and opens the model
as before wherever what was kept does not fit: a changed file or sidecar, other code, another onnxruntime, a
session onnxruntime refuses, sites the record does not name, a model with a .data file."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import worker_modules
from planted import corpus_lines, planted_model

from attnviz.corpus import engines, graph_reduce
from attnviz.corpus import items as it
from attnviz.corpus.fold import layout
from attnviz.corpus.items import read_texts
from attnviz.corpus.plan import encode_items, plan_text
from attnviz.corpus.reduce import BatchReducer
from attnviz.runtime import host, light_model, memory, memory_kept, model_summary, open_model, optcache
from attnviz.runtime import statgraph_kept as sgk

FIELDS = ("sums", "counts", "top_value", "top_item", "top_row", "top_col")


def test_a_second_commands_workers_import_no_onnx_and_write_the_same_bytes(tmp_path):
    """Asked from inside each worker process (tests/corpus/worker_modules.py: a task per process, before the pool
    closes): the first command's workers opened the model; a later command's import neither onnx nor the model's
    code; every command writes the same heads.parquet and examples.parquet."""
    code = worker_modules.command_script(tmp_path, ["--workers", "2", "--provider", "cpu", "--batch-size", "8"])
    env = {**os.environ, "ATTNVIZ_CACHE_DIR": str(tmp_path / "cache")}  # nothing kept by another test's commands
    seen = {}
    for name in ("make", "again", "third"):
        out = subprocess.run(
            [sys.executable, "-c", code, name], capture_output=True, text=True, timeout=300, check=False, env=env
        )
        assert out.returncode == 0, out.stderr
        seen[name] = eval(out.stdout.strip().splitlines()[-1])  # [[(pid, modules), (pid, modules)]]: one pool
    first = seen["make"][0]
    assert len(first) == 2 and all("onnx" in mods and "attnviz.runtime.model" in mods for _, mods in first)
    last = seen["third"][0]
    assert len({pid for pid, _ in last}) == 2 and [mods for _, mods in last] == [[], []], last
    for f in ("heads.parquet", "examples.parquet"):
        want = (tmp_path / "make" / f).read_bytes()
        assert (tmp_path / "again" / f).read_bytes() == want and (tmp_path / "third" / f).read_bytes() == want


@pytest.fixture
def kept(tmp_path, monkeypatch):
    """A planted model whose worker records an earlier "command" kept: the driver's summary, a worker's probe
    (engines._probe), its reducer's statistics session and the other worker's (warmed up unprobed); and that
    command's partials."""
    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")  # sessions in this process, as in a corpus worker
    monkeypatch.setattr(engines, "_PROBED", None)
    path = planted_model(tmp_path / "planted.onnx")
    it.sha256_model(path)
    model_summary.keep(path, model_summary.describe(open_model(str(path), provider="cpu")))
    setup = engines.WorkerSetup(str(path), "cpu", None, 1, 3, (), 2)
    engines._probe(setup)
    engines._own_reducer(setup, warm=True)  # the probing worker's reducer (the probe's sites and heads)
    full = BatchReducer(str(path), "cpu", None, 1, 3, probe=False)
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(corpus_lines(40)) + "\n")
    items = read_texts(texts)
    specs = plan_text(items, encode_items(full.model, items), None, None, 8, equal_lengths=False)
    probed = open_model(str(path), provider="cpu")
    probed.probe()
    groups = layout(probed.sites)  # the driver's, which a worker warmed up unprobed adopts (engines._work)
    full.prepare()
    full.adopt(groups, probed.kind)
    want = [full(s) for s in specs]
    return path, specs, want, groups


def _light_reducer(path, groups) -> BatchReducer:
    light = light_model.light(path, "cpu", None, 1)
    assert light is not None
    red = BatchReducer(str(path), "cpu", None, 1, 3, probe=False, opened=light)
    red.prepare()  # (as a worker warms up)
    red.adopt(groups)
    return red


def _same(got, want):
    for a, b in zip(got, want, strict=True):
        for f in FIELDS:
            assert np.array_equal(getattr(a, f), getattr(b, f)), f


def test_a_light_worker_opens_nothing_and_gives_the_same_partials(kept, monkeypatch):
    path, specs, want, groups = kept
    monkeypatch.setattr(graph_reduce.InGraphReducer, "build", _refused)  # nothing is built again
    red = _light_reducer(path, groups)
    _same([red(s) for s in specs], want)
    assert isinstance(red.in_graph, graph_reduce.InGraphReducer) and red._model is None  # the model never opened
    # the probing worker's answer is the kept probe, and its reducer takes the light model over
    setup = engines.WorkerSetup(str(path), "cpu", None, 1, 3, (), 2)
    state, provider = engines._probe(setup)
    probed = engines._own_reducer(setup, warm=True)
    assert provider == "CPUExecutionProvider" and probed._model is None and state[0]
    assert [g.heads for g in probed.groups] == [4, 4]  # the planted model's heads, counted by the kept probe
    _same([probed(s) for s in specs], want)


def test_a_worker_whose_first_task_is_a_batch_opens_nothing(kept, monkeypatch):
    """The other process took both warm-ups: this one builds its reducer for the batch's groups (engines._work's
    ``_own_reducer(setup, warm=False)``), over the light model with its kept probe."""
    path, specs, want, groups = kept
    monkeypatch.setattr(graph_reduce.InGraphReducer, "build", _refused)
    red = engines._own_reducer(engines.WorkerSetup(str(path), "cpu", None, 1, 3, tuple(groups), 2), warm=False)
    _same(red.many(specs), want)
    assert red._model is None and red.groups == groups


def test_the_memory_check_of_a_light_session_reads_its_estimates_back_without_the_graph(kept, monkeypatch):
    path, specs, want, groups = kept

    def no_estimate(*a, **k):
        raise AssertionError("worked out again")

    monkeypatch.setattr(memory.MemoryPlan, "_estimate", no_estimate)  # the first command's estimates are on disk
    red = _light_reducer(path, groups)
    _same([red(s) for s in specs], want)


def _refused(*a, **k):
    raise AssertionError("the model was opened and its statistics session built")


@pytest.mark.parametrize("change", ["sidecar", "code", "onnx", "file"])
def test_another_file_sidecar_code_or_onnx_finds_no_light_model(kept, change, monkeypatch):
    path = kept[0]
    if change == "sidecar":  # a config.json beside it may relabel its sites
        (path.parent / "config.json").write_text('{"model_type": "bert"}')
    elif change == "code":
        monkeypatch.setattr(optcache, "code_digest", lambda: "another attnviz")
    elif change == "onnx":  # (another installation: an upgrade or a reinstall rewrites its __init__.py)
        real = model_summary.installed_package
        monkeypatch.setattr(model_summary, "installed_package", lambda p: ["elsewhere"] if p == "onnx" else real(p))
    else:
        path.write_bytes(path.read_bytes() + b"\0")  # (a changed file: its sha256 is not known)
    assert light_model.light(path, "cpu", None, 1) is None


def _opens_as_before(path, specs, want, groups):
    red = _light_reducer(path, groups)
    got = [red(s) for s in specs]
    assert red._model is not None  # opened, as a worker without kept records does
    _same(got, want)


def test_another_onnxruntime_opens_the_model(kept, monkeypatch):
    path, specs, want, groups = kept
    from attnviz.runtime import ort_build

    real = ort_build.installed()  # another build: the same files, one library more (runtime/ort_build.py)
    monkeypatch.setattr(ort_build, "installed", lambda: [*real[:4], sorted([*real[4], ["libother.so", 1, 0]])])
    light = light_model.light(path, "cpu", None, 1)  # (the driver's summary does not depend on onnxruntime)
    assert light is not None and light.take_probe() is None
    _opens_as_before(path, specs, want, groups)


def test_a_refused_or_damaged_session_opens_the_model(kept, monkeypatch):
    path, specs, want, groups = kept
    real, calls = host.make_session, []

    def refuse_first(*a, **k):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("onnxruntime refuses the kept graph")
        return real(*a, **k)

    monkeypatch.setattr(host, "make_session", refuse_first)
    _opens_as_before(path, specs, want, groups)
    monkeypatch.setattr(host, "make_session", real)
    for entry in (Path(os.environ["ATTNVIZ_CACHE_DIR"]) / sgk.KIND).iterdir():  # the kept graph's bytes damaged
        entry.write_bytes(entry.read_bytes().replace(b"attnviz_stat_sums", b"attnviz_stat_SUMS"))
    _opens_as_before(path, specs, want, groups)


def test_sites_the_record_does_not_name_open_the_model(kept):
    path, specs, want, groups = kept
    one = [groups[0]]  # another set of sites than the kept session was made for
    red = _light_reducer(path, one)
    got = [red(s) for s in specs]
    assert red._model is not None
    full = BatchReducer(str(path), "cpu", None, 1, 3, groups=one, probe=False)
    _same(got, [full(s) for s in specs])


def test_a_model_with_a_data_file_keeps_no_worker_records(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    m = onnx.load(str(planted_model(tmp_path / "p.onnx")))
    path = tmp_path / "x.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, location="x.onnx.data", size_threshold=0)
    it.sha256_model(path)
    model = open_model(str(path), provider="cpu")
    assert model.data_files and model_summary.describe(model) is None  # (no summary: its driver opens it)
    BatchReducer(str(path), "cpu", None, 1, 3, probe=False).prepare()
    assert not (tmp_path / "cache" / light_model.KIND).exists()
    assert light_model.light(path, "cpu", None, 1) is None


def test_a_kept_statistics_graph_reads_back_as_the_bytes_it_was_kept_from(kept):
    """The light worker hands onnxruntime the kept graph's bytes, and the session's kept optimised graph is named
    by the bytes the first command's session was made from: a parsed graph serialises to the same bytes."""
    for entry in (Path(os.environ["ATTNVIZ_CACHE_DIR"]) / sgk.KIND).iterdir():
        graph = entry.read_bytes().split(b"\n", 1)[1]
        assert onnx.load_model_from_string(graph).SerializeToString() == graph


def test_a_kept_plan_estimates_as_the_full_plan(kept):
    entry = next((Path(os.environ["ATTNVIZ_CACHE_DIR"]) / sgk.KIND).iterdir())
    graph = entry.read_bytes().split(b"\n", 1)[1]
    full = memory.MemoryPlan(graph)
    head = memory.plan_head(onnx.load_model_from_string(graph))
    light = memory_kept.KeptPlan(head, None, lambda: memory.MemoryPlan(graph))
    assert (light.weights, light.fixed) == (full.weights, full.fixed) and light._full is None
    shapes = {"input_ids": ((2, 9), 7), "attention_mask": ((2, 9), 7)}
    assert light.estimate(shapes, ["attnviz_stat_sums"], 2**40) == full.estimate(shapes, ["attnviz_stat_sums"], 2**40)


def test_the_element_types_are_onnx_own():
    for dtype, elem in memory_kept.ELEM_TYPES.items():
        assert onnx.helper.np_dtype_to_tensor_dtype(dtype) == elem
    assert memory_kept.elem_type(np.dtype("complex64")) == onnx.helper.np_dtype_to_tensor_dtype(np.dtype("complex64"))
