"""runtime/optcache.py: a model file's sha256 and onnxruntime's optimised graph of an edited copy of it, kept on disk
between commands (``ATTNVIZ_CACHE_DIR``).  Checked against the file's bytes (hashlib), against a session made
without the cache (outputs byte-equal), and through a changed model file (the key changes, nothing stale is read)."""

import hashlib
import json
import os

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx_builders import tiny_text_model

from attnviz.corpus import items as it
from attnviz.runtime import graph as gr
from attnviz.runtime import open_model, optcache

FEEDS = {"input_ids": np.array([[1, 2, 3, 4, 5], [5, 4, 3, 2, 1]], np.int64)}


def _files(folder, kind):
    return sorted((folder / kind).iterdir()) if (folder / kind).is_dir() else []


def test_a_hash_is_kept_and_a_changed_file_is_hashed_again(tmp_path, cache, monkeypatch):
    f = tmp_path / "m.onnx"
    f.write_bytes(b"first version " * 1000)
    assert it.sha256_model(f) == hashlib.sha256(f.read_bytes()).hexdigest()
    assert len(_files(cache, "sha256")) == 1

    # kept: a second command reads no byte of the file
    def no_read(*a, **k):
        raise AssertionError("hashed again")

    monkeypatch.setattr(it, "sha256_file", no_read)
    assert it.sha256_model(f) == hashlib.sha256(f.read_bytes()).hexdigest()
    monkeypatch.undo()
    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", str(cache))

    # the same size and modification time, other bytes: the change time moved, so the file is hashed again
    st = os.stat(f)
    f.write_bytes(b"other version " * 1000)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(f).st_size == st.st_size and os.stat(f).st_mtime_ns == st.st_mtime_ns
    assert it.sha256_model(f) == hashlib.sha256(b"other version " * 1000).hexdigest()


def test_a_damaged_hash_entry_is_not_believed(tmp_path, cache):
    f = tmp_path / "m.onnx"
    f.write_bytes(b"x" * 5000)
    it.sha256_model(f)
    (entry,) = _files(cache, "sha256")
    entry.write_text("not a hash")
    assert optcache.known_sha256(f) is None
    assert it.sha256_model(f) == hashlib.sha256(b"x" * 5000).hexdigest()
    assert entry.read_text() == hashlib.sha256(b"x" * 5000).hexdigest()  # written again


def _edited(m):
    edited, exposed = gr.instrument(m.graph, m.graph_sites, "dense")
    return edited, [o.name for o in edited.graph.output]


def _outputs(path, keep):
    """A fresh model's extra session (one command's), its outputs on FEEDS."""
    m = open_model(path, provider="cpu", threads=1)
    edited, fetch = _edited(m)
    sess = m.extra_session(edited, "maps", keep=keep)
    return [np.asarray(a) for a in sess.run(fetch, FEEDS)]


def _same(a, b):
    return len(a) == len(b) and all(x.dtype == y.dtype and x.tobytes() == y.tobytes() for x, y in zip(a, b))


def test_an_optimised_graph_is_kept_then_read_with_the_same_outputs(tmp_path, cache):
    path = tiny_text_model(tmp_path / "m.onnx", d=64)
    fresh = _outputs(path, keep=False)
    first = _outputs(path, keep=True)  # the file's hash is not known yet: nothing kept (no hashing for it)
    assert _files(cache, "optimized") == [] and _same(first, fresh)

    it.sha256_model(path)  # a corpus command's driver hashes the model
    second = _outputs(path, keep=True)
    (entry,) = _files(cache, "optimized")
    assert _same(second, fresh)
    kept = onnx.load(str(entry), load_external_data=False)  # onnxruntime's graph, its weights left in the model file
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in kept.graph.initializer)
    made = os.stat(entry).st_mtime_ns
    third = _outputs(path, keep=True)  # read, not written again
    assert os.stat(entry).st_mtime_ns == made and _same(third, fresh)


def test_a_damaged_optimised_graph_is_made_again(tmp_path, cache):
    path = tiny_text_model(tmp_path / "m.onnx", d=64)
    it.sha256_model(path)
    fresh = _outputs(path, keep=False)
    _outputs(path, keep=True)
    (entry,) = _files(cache, "optimized")
    entry.write_bytes(b"\x08\x07garbage")
    assert _same(_outputs(path, keep=True), fresh)
    onnx.load(str(entry), load_external_data=False)  # written again, whole


def _reweighted(src, dst):
    """``src`` with other embedding values: the same graph, other weights (and other file bytes)."""
    m = onnx.load(str(src))
    emb = next(t for t in m.graph.initializer if t.name == "emb")
    emb.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(emb)[::-1].copy(), "emb"))
    onnx.save(m, str(dst))
    return dst


def test_a_changed_model_file_never_reads_the_old_graph(tmp_path, cache):
    path = tiny_text_model(tmp_path / "m.onnx", d=64)
    it.sha256_model(path)
    old = _outputs(path, keep=True)
    assert len(_files(cache, "optimized")) == 1

    # the same file name, new weights: a new hash, a new entry; the outputs are the new file's
    _reweighted(path, tmp_path / "new.onnx").replace(path)
    want = _outputs(path, keep=False)
    assert not _same(want, old)
    assert _same(_outputs(path, keep=True), want)  # hash unknown: made, nothing kept
    assert it.sha256_model(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert _same(_outputs(path, keep=True), want)
    assert len(_files(cache, "optimized")) == 2


def test_nothing_is_kept_when_off_or_for_weights_beside_the_file(tmp_path, cache, monkeypatch):
    path = tiny_text_model(tmp_path / "m.onnx", d=64)
    it.sha256_model(path)
    # weights in a .data file beside the model (too large to be read in with the graph): the model file's hash
    # does not name them
    m = onnx.load(str(tiny_text_model(tmp_path / "big.onnx", d=512)))
    onnx.save(m, str(tmp_path / "ext.onnx"), save_as_external_data=True, location="ext.onnx.data", size_threshold=0)
    it.sha256_model(tmp_path / "ext.onnx")
    _outputs(tmp_path / "ext.onnx", keep=True)
    assert _files(cache, "optimized") == []

    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", "off")
    assert optcache.folder() is None
    _outputs(path, keep=True)
    it.sha256_model(path)
    assert _files(cache, "optimized") == []


def test_the_key_names_the_graph_onnxruntime_and_the_cpu(tmp_path, cache):
    path = tiny_text_model(tmp_path / "m.onnx", d=64)
    it.sha256_model(path)
    data = onnx.load(str(path)).SerializeToString()
    key = optcache.graph_key(path, data)
    assert key is not None and key.key.startswith(hashlib.sha256(path.read_bytes()).hexdigest())
    assert key.folder == str(cache)
    assert optcache.graph_key(path, data + b"\x00") != key
    assert optcache.optimized_path(key, "1.0") != optcache.optimized_path(key, "1.1")
    m = helper.make_model(helper.make_graph([], "g", [], []))
    assert optcache.graph_key(tmp_path / "unhashed.onnx", m.SerializeToString()) is None


def test_memory_estimates_are_kept_by_graph_and_shapes(tmp_path, cache, monkeypatch):
    from attnviz.runtime import memory

    path = tiny_text_model(tmp_path / "m.onnx", d=64)
    data = path.read_bytes()
    it.sha256_model(path)
    key = optcache.graph_key(path, data)
    shapes = {"input_ids": ((2, 5), onnx.TensorProto.INT64)}
    first = memory.MemoryPlan(data, keep=key).estimate(shapes, ["logits"], within=2**40)
    assert first.bytes > first.weights > 0 and len(_files(cache, "memory")) == 1
    assert first == memory.MemoryPlan(data).estimate(shapes, ["logits"], within=2**40)  # as without keeping

    # the next command's session of the same graph: read, not worked out again
    def no_estimate(*a, **k):
        raise AssertionError("estimated again")

    monkeypatch.setattr(memory.MemoryPlan, "_estimate", no_estimate)
    assert memory.MemoryPlan(data, keep=key).estimate(shapes, ["logits"], within=2**40) == first
    # other shapes (past the first's bucket), another cap, another graph: not read from there
    for plan, feeds, cap in (
        (memory.MemoryPlan(data, keep=key), {"input_ids": ((2, 500), onnx.TensorProto.INT64)}, 2**40),
        (memory.MemoryPlan(data, keep=key), shapes, 2**30),
        (memory.MemoryPlan(data, keep=optcache.GraphKey(key.folder, key.key + "x")), shapes, 2**40),
    ):
        with pytest.raises(AssertionError, match="estimated again"):
            plan.estimate(feeds, ["logits"], within=cap)
    monkeypatch.undo()
    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", str(cache))
    (entry,) = _files(cache, "memory")
    entry.write_text("[1, 2]")  # not an estimate: worked out again
    assert memory.MemoryPlan(data, keep=key).estimate(shapes, ["logits"], within=2**40) == first


def test_the_crash_isolation_child_keeps_and_reads_the_same_graph(tmp_path, cache, monkeypatch):
    monkeypatch.delenv("ATTNVIZ_INPROCESS")  # sessions in the child: keep travels with the session's arguments
    path = tiny_text_model(tmp_path / "m.onnx", d=64)
    # the child (started now if none runs) has another cache folder in its environment: the parent's is used
    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", str(tmp_path / "elsewhere"))
    fresh = _outputs(path, keep=False)
    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", str(cache))
    it.sha256_model(path)
    assert _same(_outputs(path, keep=True), fresh)
    (entry,) = _files(cache, "optimized")
    made = os.stat(entry).st_mtime_ns
    assert _same(_outputs(path, keep=True), fresh) and os.stat(entry).st_mtime_ns == made
    assert len(_files(cache, "memory")) == 1  # the parent's estimate of that session, kept too
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.skipif(os.name != "posix", reason="file modes")
def test_a_cache_folder_others_may_write_is_neither_read_nor_written(tmp_path, cache):
    """Another user could plant a hash (or an optimised graph) there: a planted wrong hash is not believed."""
    f = tmp_path / "m.onnx"
    f.write_bytes(b"y" * 5000)
    it.sha256_model(f)
    (entry,) = _files(cache, "sha256")
    entry.write_text("0" * 64)  # what a planted entry would say
    os.chmod(cache, 0o777)
    assert optcache.known_sha256(f) is None
    assert it.sha256_model(f) == hashlib.sha256(f.read_bytes()).hexdigest()
    assert entry.read_text() == "0" * 64  # and nothing written there either
    os.chmod(cache, 0o700)
    assert optcache.known_sha256(f) == "0" * 64  # the same folder, this user's alone again: read


def _bad_arity(src, dst):
    """``src`` with one Add given a third input (the ONNX spec allows two)."""
    m = onnx.load(str(src))
    add = next(n for n in m.graph.node if n.op_type == "Add")
    add.input.append(add.input[0])
    onnx.save(m, str(dst))
    return dst


def test_a_passed_arity_check_is_kept_and_a_bad_file_is_always_refused(tmp_path, cache, monkeypatch):
    """runtime/loading.py: a file that passed the node-count check is not checked again by a later process (onnx's
    schema registry, ~9 ms a process, is then never built); only a pass is kept, only for a file whose sha256 is
    known, and the key names the file's bytes, onnx's version and the checking code."""
    from attnviz import AttnvizError
    from attnviz.runtime import loading

    path = tiny_text_model(tmp_path / "m.onnx")
    loading.load_model(path)
    assert _files(cache, loading.ARITY_KIND) == []  # the file's hash unknown: nothing kept, never hashed for this
    it.sha256_model(path)
    want = loading.load_model(path)[0]
    (entry,) = _files(cache, loading.ARITY_KIND)
    checked = []
    real = loading._check_arity
    monkeypatch.setattr(loading, "_check_arity", lambda m, p: checked.append(p) or real(m, p))
    got = loading.load_model(path)[0]
    assert checked == [] and got.SerializeToString() == want.SerializeToString()

    for data in (b"{not json", b'{"passed": false}', b'{"passed": 1}', b"[]"):  # damaged: checked again, kept again
        entry.write_bytes(data)
        loading.load_model(path)
        assert len(checked) == 1 and entry.read_bytes() == b'{"passed": true}'
        checked.clear()
    with monkeypatch.context() as m:
        m.setattr(onnx, "__version__", onnx.__version__ + ".1")  # other schemas
        loading.load_model(path)
        m.setattr(loading, "_checking_code", lambda: "0" * 64)  # other checking code
        loading.load_model(path)
        assert len(checked) == 2 and len(_files(cache, loading.ARITY_KIND)) == 3
        checked.clear()

    bad = _bad_arity(path, tmp_path / "bad.onnx")
    it.sha256_model(bad)
    for _ in range(2):
        with pytest.raises(AttnvizError, match=r"\(Add\) has 3 inputs, the ONNX spec allows 2"):
            loading.load_model(bad)
    assert len(_files(cache, loading.ARITY_KIND)) == 3  # a refusal is not kept
    _bad_arity(path, path)  # the checked file rewritten: its stat changes, its hash is unknown, it is checked
    with pytest.raises(AttnvizError, match="the ONNX spec allows 2"):
        loading.load_model(path)


def _word_tokenizer(vocab=("the", "cat")) -> dict:
    words = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(vocab)}}
    return {
        "version": "1.0",
        "model": {"type": "WordLevel", "vocab": words, "unk_token": "[UNK]"},
        "pre_tokenizer": {"type": "Whitespace"},
    }


def test_a_tokenizer_text_the_json_guard_passed_is_not_guarded_again(tmp_path, cache, monkeypatch):
    """runtime/inputs.py: a tokenizer.json text that parsed whole is parsed without the hostile-JSON guard (two regex
    passes, ~10 ms over MiniLM's) by a later process; kept by the text's sha256 only where the cache folder exists;
    only a pass; an edited text, a damaged entry or other guard code is guarded again."""
    from attnviz import AttnvizError
    from attnviz.core import untrusted
    from attnviz.runtime import inputs

    tok = tmp_path / "tokenizer.json"
    tok.write_text(json.dumps(_word_tokenizer()))
    want = inputs.HFTokenizer.from_file(tok).encode_ids("the cat sat").ids
    assert want == [1, 2, 0]
    assert not cache.exists()  # no command made the folder: nothing kept, and the folder is not made for it
    cache.mkdir()
    guarded = []
    real = untrusted.check_json

    def guard(text, *a, **k):
        if "WordLevel" in text:  # (the cache's own entries are read through the guard too)
            guarded.append(1)
        return real(text, *a, **k)

    monkeypatch.setattr(untrusted, "check_json", guard)
    inputs.HFTokenizer.from_file(tok)
    (entry,) = _files(cache, inputs.JSON_CHECKED)
    assert len(guarded) == 1
    assert inputs.HFTokenizer.from_file(tok).encode_ids("the cat sat").ids == want and len(guarded) == 1

    guarded.clear()
    for data in (b"{not json", b'{"passed": 1}', b"null"):  # damaged: guarded again, kept again
        entry.write_bytes(data)
        inputs.HFTokenizer.from_file(tok)
        assert len(guarded) == 1 and entry.read_bytes() == b'{"passed": true}'
        guarded.clear()
    with monkeypatch.context() as m:
        m.setattr(inputs, "_guard_code", lambda: "0" * 64)  # another guard
        inputs.HFTokenizer.from_file(tok)
    tok.write_text(json.dumps(_word_tokenizer(("the", "dog"))))  # another text
    assert inputs.HFTokenizer.from_file(tok).encode_ids("the dog").ids == [1, 2]
    assert len(guarded) == 2 and len(_files(cache, inputs.JSON_CHECKED)) == 3
    guarded.clear()

    deep = _word_tokenizer()
    deep["extra"] = json.loads("[" * 150 + "]" * 150)
    tok.write_text(json.dumps(deep))
    for _ in range(2):  # refused each time: a refusal is not kept
        with pytest.raises(AttnvizError, match="nested deeper than 100"):
            inputs.HFTokenizer.from_file(tok)
    assert len(guarded) == 2 and len(_files(cache, inputs.JSON_CHECKED)) == 3
