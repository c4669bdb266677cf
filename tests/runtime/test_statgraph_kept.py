"""runtime/statgraph_kept.py: a corpus worker's statistics graph kept between commands.  Checked against the graph
that statgraph builds (the same bytes, the same exposed tensors; a worker's partials: tests/corpus/
test_kept_statgraph.py), through damaged and planted entries (not believed: the graph is built and kept again), and
through what the key must name (the model's bytes, attnviz's source, the arguments, the sites as probed)."""

import hashlib
import json
import shutil

import pytest
from onnx_builders import tiny_text_model

from attnviz.corpus import items as it
from attnviz.corpus.reduce import layout
from attnviz.runtime import open_model, optcache
from attnviz.runtime import statgraph as sg
from attnviz.runtime import statgraph_kept as sgk


def _entries(folder):
    return sorted((folder / sgk.KIND).iterdir()) if (folder / sgk.KIND).is_dir() else []


def _model(path):
    m = open_model(str(path), provider="cpu")
    assert m.probe()
    return m, {g.site for g in layout(m.sites)}


def _encoder(tmp_path, name="m.onnx", seed=0):
    path = tiny_text_model(tmp_path / name, heads=4, d=16, seed=seed)
    it.sha256_model(path)  # as the corpus driver's hash does before its workers open the model
    return path


def _no_build(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("built again")

    monkeypatch.setattr(sg, "stats_model", refuse)


def _same_graph(got, want):
    assert got[0].SerializeToString() == want[0].SerializeToString()
    assert (got[1].outputs, got[1].site_extra, got[2]) == (want[1].outputs, want[1].site_extra, want[2])


@pytest.mark.parametrize("rows, join", [(False, False), (True, False), (False, True)])
def test_the_graph_is_kept_and_the_next_command_reads_it_without_building(tmp_path, cache, monkeypatch, rows, join):
    path = _encoder(tmp_path)
    model, wanted = _model(path)
    want = sg.stats_model(model.graph, model.graph_sites, wanted, rows, join)
    _same_graph(sgk.stats_model(model, wanted, rows, join), want)  # built, and kept
    (entry,) = _entries(cache)

    _no_build(monkeypatch)
    again, wanted = _model(path)  # the next command's worker
    _same_graph(sgk.stats_model(again, wanted, rows, join), want)
    assert _entries(cache) == [entry]


def test_a_damaged_or_planted_entry_is_not_believed(tmp_path, cache):
    path = _encoder(tmp_path)
    model, wanted = _model(path)
    want = sg.stats_model(model.graph, model.graph_sites, wanted)
    sgk.stats_model(model, wanted)
    (entry,) = _entries(cache)
    good = entry.read_bytes()
    head, graph = good.split(b"\n", 1)
    h = json.loads(head)

    def entry_of(graph_bytes, **change):
        fields = {**h, "sha256": hashlib.sha256(graph_bytes).hexdigest(), **change}
        return json.dumps(fields).encode() + b"\n" + graph_bytes

    planted = open_model(str(path), provider="cpu").proto  # a whole model, but not the statistics graph
    bad = [
        b"",
        b"no header",
        b"{not json\n" + graph,
        graph[:100],
        good[:-10],  # truncated: not the bytes the header names
        head + b"\n" + graph[:-1] + bytes([graph[-1] ^ 1]),
        entry_of(graph, format=sgk.FORMAT + 1),
        entry_of(graph, outputs=h["outputs"][:-1]),  # a site short
        entry_of(graph, outputs=[1] * len(h["outputs"])),
        entry_of(graph, site_extra=[{"mask_index": 3}] * len(h["site_extra"])),
        entry_of(graph, on=[*h["on"], len(h["outputs"])]),  # a site the model does not have
        entry_of(graph, on=list(reversed(h["on"])) * 2),
        entry_of(b"\x08\x07garbage"),  # its own digest, no ONNX graph
        entry_of(planted.SerializeToString()),  # its own digest, no statistics
    ]
    for data in bad:
        entry.write_bytes(data)
        _same_graph(_fresh(path), want)
        assert entry.read_bytes() == good, data[:40]  # built again, and kept again


def _fresh(path):
    model, wanted = _model(path)
    return sgk.stats_model(model, wanted)


def test_the_key_names_the_file_the_code_the_arguments_and_the_sites(tmp_path, cache, monkeypatch):
    path = _encoder(tmp_path)
    model, wanted = _model(path)
    key = sgk.graph_key(model, wanted, False, False)
    assert key is not None and key.folder == str(cache)
    assert sgk.graph_key(_model(path)[0], wanted, False, False) == key  # the next command's

    assert sgk.graph_key(model, wanted, True, False) != key
    assert sgk.graph_key(model, wanted, False, True) != key
    assert sgk.graph_key(model, set(sorted(wanted)[:1]), False, False) != key
    with monkeypatch.context() as m:
        m.setattr(optcache, "code_digest", lambda: "0" * 64)  # attnviz edited or upgraded
        assert sgk.graph_key(model, wanted, False, False) != key
        m.setattr(optcache, "code_digest", lambda: None)  # no sources to name the code by: nothing kept
        assert sgk.graph_key(model, wanted, False, False) is None
    unprobed = open_model(str(path), provider="cpu")  # the sites before the probe (heads unknown)
    assert sgk.graph_key(unprobed, wanted, False, False) != key

    # the same bytes under another name: the graph's weights name their file
    twin = tmp_path / "twin" / "t.onnx"
    twin.parent.mkdir()
    shutil.copyfile(path, twin)
    it.sha256_model(twin)
    twin_model, _ = _model(twin)
    assert sgk.graph_key(twin_model, wanted, False, False) not in (None, key)
    built, _, _ = sgk.stats_model(twin_model, wanted)
    assert {e.value for t in built.graph.initializer for e in t.external_data if e.key == "location"} == {"t.onnx"}

    # another file at the same path: another hash, another key; unhashed, none at all
    shutil.copyfile(_encoder(tmp_path, "other.onnx", seed=1), path)
    assert sgk.graph_key(_model(path)[0], wanted, False, False) is None
    it.sha256_model(path)
    assert sgk.graph_key(_model(path)[0], wanted, False, False) not in (None, key)

    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", "off")
    assert sgk.graph_key(_model(path)[0], wanted, False, False) is None


def test_sites_whose_instrumenting_renames_them_are_not_kept(tmp_path, cache):
    """A fused site's tensor name is set on its Site while the graph is instrumented: such graphs are built each
    time, so that a site reads as it always did."""
    path = _encoder(tmp_path)
    model, wanted = _model(path)
    model.graph_sites[0].method = "onnx-attention"
    assert sgk.graph_key(model, wanted, False, False) is None
