"""runtime/probe_kept.py: a model's probe (stacks and head counts) kept between commands, as a corpus worker reads
it.  Checked against a probe that ran (the same state, found without a session), through damaged and stale entries
(not believed: the probe runs and finds the model's own heads), and through what the key must name (the model's
bytes, attnviz's source, onnxruntime's version, the sites as labelled before the probe)."""

import json
import shutil

import onnxruntime
import pytest
from onnx_builders import tiny_text_model

from attnviz.corpus import engines
from attnviz.corpus import items as it
from attnviz.runtime import open_model, optcache
from attnviz.runtime import probe_kept as pk
from attnviz.runtime.model import AttentionModel


@pytest.fixture(autouse=True)
def _no_probed_model(monkeypatch):
    monkeypatch.setattr(engines, "_PROBED", None)  # what engines._probe leaves for this process's reducer


def _entries(folder):
    return sorted((folder / pk.KIND).iterdir()) if (folder / pk.KIND).is_dir() else []


def _setup(path):
    return engines.WorkerSetup(str(path), "cpu", None, 1, 5, (), 1)


def _decoder(tmp_path, name="m.onnx", seed=0):
    """A causal model whose graph leaves its head counts to the probe (which changes the sites: the key is taken
    before)."""
    path = tiny_text_model(tmp_path / name, heads=4, d=16, causal=True, seed=seed)
    it.sha256_model(path)  # as the corpus driver's hash does before its workers probe
    return path


def _probed(path):
    m = open_model(str(path), provider="cpu")
    assert m.probe()
    return m.probe_state(), m.provider


def _no_probe(monkeypatch):
    def refuse(self):
        raise AssertionError("probed again")

    monkeypatch.setattr(AttentionModel, "probe", refuse)


def test_a_workers_probe_is_kept_and_the_next_reads_it_without_a_session(tmp_path, cache, monkeypatch):
    path = _decoder(tmp_path)
    want = _probed(path)
    assert [s.heads for s in open_model(str(path)).sites] == [0, 0] and want[0][2] == [("decoder", 4)] * 2

    assert engines._probe(_setup(path)) == want
    (entry,) = _entries(cache)
    engines._PROBED = None

    _no_probe(monkeypatch)
    made = []
    real = AttentionModel._session
    monkeypatch.setattr(AttentionModel, "_session", lambda self, mode: made.append(mode) or real(self, mode))
    assert engines._probe(_setup(path)) == want
    assert made == []  # no session with every map exposed, no dummy run
    _, model = engines._PROBED
    assert model.open_provider is None and [(s.stack, s.heads) for s in model.sites] == want[0][2]
    assert _entries(cache) == [entry]


def test_a_damaged_or_foreign_entry_is_not_believed(tmp_path, cache):
    path = _decoder(tmp_path)
    want = _probed(path)
    engines._probe(_setup(path))
    (entry,) = _entries(cache)
    good = json.loads(entry.read_bytes())
    bad = [
        b"{not json",
        json.dumps({**good, "format": pk.FORMAT + 1}).encode(),
        json.dumps({**good, "state": [True, True, good["state"][2][:-1]]}).encode(),  # a site short
        json.dumps({**good, "state": [True, True, [["decoder", 0]] * len(good["state"][2])]}).encode(),
        json.dumps({**good, "state": [True, True, [["decoder", True]] * len(good["state"][2])]}).encode(),
        json.dumps({**good, "state": [1, True, good["state"][2]]}).encode(),
        json.dumps({**good, "provider": None}).encode(),
    ]
    for data in bad:
        entry.write_bytes(data)
        engines._PROBED = None
        assert engines._probe(_setup(path)) == want
        assert json.loads(entry.read_bytes()) == good  # the probe ran and kept its own again


def test_the_key_names_the_file_the_code_the_versions_and_the_labels(tmp_path, cache, monkeypatch):
    path = _decoder(tmp_path)
    model = open_model(str(path), provider="cpu")
    key = pk.probe_key(model)
    assert key is not None and key.folder == str(cache)
    assert pk.probe_key(open_model(str(path), provider="cpu")) == key  # the next command's

    with monkeypatch.context() as m:
        m.setattr(optcache, "code_digest", lambda: "0" * 64)  # attnviz edited or upgraded
        assert pk.probe_key(model) != key
        m.setattr(optcache, "code_digest", lambda: None)  # no sources to name the code by: nothing kept
        assert pk.probe_key(model) is None
    with monkeypatch.context() as m:
        m.setattr(onnxruntime, "__version__", onnxruntime.__version__ + ".1")
        assert pk.probe_key(model) != key
    assert pk.probe_key(open_model(str(path), provider="auto")) != key
    model.probe()  # the sites before the probe (heads unknown) are not the sites after it
    assert pk.probe_key(model) != key

    # another file at the same path: another hash, another key; unhashed, none at all
    other = _decoder(tmp_path, "other.onnx", seed=1)
    shutil.copyfile(other, path)
    assert pk.probe_key(open_model(str(path), provider="cpu")) is None
    it.sha256_model(path)
    assert pk.probe_key(open_model(str(path), provider="cpu")) not in (None, key)

    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", "off")
    assert pk.probe_key(open_model(str(path), provider="cpu")) is None


def test_a_stale_probe_of_other_code_is_not_read(tmp_path, cache, monkeypatch):
    """A probe kept by another attnviz (here: its heads planted wrong) is under another key: the probe runs."""
    path = _decoder(tmp_path)
    want = _probed(path)
    with monkeypatch.context() as m:
        m.setattr(optcache, "code_digest", lambda: "0" * 64)
        model = open_model(str(path), provider="cpu")
        stale = pk.KeptProbe((True, True, [("encoder", 3)] * len(model.sites)), "CPUExecutionProvider")
        pk.keep(pk.probe_key(model), stale)
        assert engines._probe(_setup(path))[0] == stale.state  # that attnviz reads its own
    engines._PROBED = None
    assert engines._probe(_setup(path)) == want
    assert len(_entries(cache)) == 2


def test_source_digest_names_every_source_file(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("A = 1\n")
    (pkg / "sub" / "b.py").write_text("B = 2\n")
    (pkg / "notes.txt").write_text("not code")
    first = optcache.source_digest(pkg)
    assert first is not None and optcache.source_digest(pkg) == first
    (pkg / "notes.txt").write_text("other notes")
    assert optcache.source_digest(pkg) == first
    (pkg / "sub" / "b.py").write_text("B = 3\n")
    assert optcache.source_digest(pkg) != first
    (pkg / "sub" / "b.py").write_text("B = 2\n")
    (pkg / "sub" / "b.py").rename(pkg / "sub" / "c.py")
    assert optcache.source_digest(pkg) != first
    assert optcache.source_digest(tmp_path / "empty") is None
    assert optcache.code_digest() == optcache.source_digest(optcache.Path(optcache.__file__).resolve().parents[1])
