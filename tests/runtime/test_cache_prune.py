"""runtime/cache_prune.py: the cache folder (runtime/optcache.py) held to ``ATTNVIZ_CACHE_MAX_MB``, the entries used
longest ago removed first, a killed write's temporary file once a day old; an invalid cap refused in one line.  Ages
are set with os.utime; what is left is checked by listing the folder."""

import hashlib
import os
import time

import pytest
from cli_run import run_cli
from onnx_builders import tiny_text_model

from attnviz import AttnvizError
from attnviz.core.writes import atomic_path
from attnviz.corpus import items as it
from attnviz.runtime import cache_prune, optcache

MB = 2**20
OLD = 1_000_000_000  # 2001: older than any write or read of the test (seconds)
DAY = 24 * 3600


def _key(cache, name):
    return optcache.GraphKey(str(cache), name)


def _path(cache, kind, name):
    return cache / kind / hashlib.sha256(name.encode()).hexdigest()


def _keep(cache, kind, name, size, age):
    """An entry of ``size`` bytes written, then dated ``age`` seconds after OLD; its path."""
    optcache.keep_bytes(kind, _key(cache, name), name.encode() * (size // len(name)))
    path = _path(cache, kind, name)
    os.utime(path, (OLD + age, OLD + age))
    return path


def _left(cache):
    return sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*") if p.is_file() or p.is_symlink())


def test_writes_past_the_cap_remove_the_oldest_entries_first(cache, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_CACHE_MAX_MB", "1")
    a = _keep(cache, "statgraph", "a", 300_000, 0)
    b = _keep(cache, "probe", "b", 300_000, 1)  # another kind: one cap, one age order over all of them
    c = _keep(cache, "statgraph", "c", 300_000, 2)
    assert all(p.exists() for p in (a, b, c))  # 900 kB: under 1 MB
    d = _keep(cache, "memory", "d", 300_000, 3)  # 1.2 MB: the oldest go until the folder is under 3/4 MB
    assert not a.exists() and not b.exists() and c.exists() and d.exists()
    assert sum(p.stat().st_size for p in cache.rglob("*") if p.is_file()) <= 0.75 * MB
    assert optcache.kept_bytes("statgraph", _key(cache, "c")) == b"c" * 300_000


def test_a_read_refreshes_an_entry_so_it_survives(cache, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_CACHE_MAX_MB", "1")
    a = _keep(cache, "statgraph", "a", 300_000, 0)
    b = _keep(cache, "statgraph", "b", 300_000, 1)
    c = _keep(cache, "statgraph", "c", 300_000, 2)
    assert optcache.kept_bytes("statgraph", _key(cache, "a")) == b"a" * 300_000  # the oldest, used now
    assert a.stat().st_mtime > c.stat().st_mtime
    _keep(cache, "statgraph", "d", 300_000, 3)
    assert a.exists() and not b.exists() and not c.exists()


def test_a_fresh_entry_read_keeps_its_time(cache):
    """A read moves only an entry older than an hour: the workers of one corpus run write no times."""
    a = _keep(cache, "statgraph", "a", 1000, 0)
    fresh = time.time_ns() - cache_prune.REFRESH_AFTER_NS // 2  # written half an hour ago
    os.utime(a, ns=(fresh, fresh))
    optcache.kept_bytes("statgraph", _key(cache, "a"))
    assert a.stat().st_mtime_ns == fresh


def test_a_hash_and_an_optimised_graph_read_are_refreshed(tmp_path, cache):
    from test_optcache import _outputs

    path = tiny_text_model(tmp_path / "m.onnx", d=64)
    it.sha256_model(path)
    _outputs(path, keep=True)
    entries = [p for p in cache.rglob("*") if p.is_file() and p.parent.name in ("sha256", "optimized")]
    assert len(entries) == 2
    for p in entries:
        os.utime(p, (OLD, OLD))
    _outputs(path, keep=True)  # reads the file's hash (its session key) and the optimised graph
    assert all(p.stat().st_mtime > OLD + 3600 for p in entries)


@pytest.mark.skipif(os.name != "posix", reason="symbolic links")
def test_only_entries_in_the_kind_folders_are_counted_or_removed(tmp_path, cache, monkeypatch):
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / ("0" * 64)
    target.write_bytes(b"t" * 2 * MB)
    cache.mkdir(mode=0o700)
    (cache / "notes.txt").write_bytes(b"n" * 2 * MB)  # beside the kind folders
    (cache / "mine").mkdir()
    (cache / "mine" / ("1" * 64)).write_bytes(b"m" * 2 * MB)  # an entry's name, in a folder that is no kind
    (cache / "statgraph").mkdir()
    (cache / "statgraph" / "README").write_bytes(b"r" * 2 * MB)  # in a kind folder, no entry's name
    (cache / "statgraph" / ("2" * 64)).symlink_to(target)  # a link with an entry's name
    (cache / "probe").symlink_to(outside, target_is_directory=True)  # a link in a kind folder's place
    others = _left(cache)
    for p in [*cache.rglob("*"), target]:
        os.utime(p, (OLD, OLD), follow_symlinks=False)

    monkeypatch.setenv("ATTNVIZ_CACHE_MAX_MB", "1")
    a = _keep(cache, "statgraph", "a", 300_000, 5)  # 10 MB beside it, none of it counted: nothing removed
    assert _left(cache) == sorted([*others, a.relative_to(cache).as_posix()])
    monkeypatch.setenv("ATTNVIZ_CACHE_MAX_MB", "0")
    optcache.keep_bytes("statgraph", _key(cache, "b"), b"b")  # a cap of 0: every entry goes, this one too
    assert _left(cache) == others and target.read_bytes() == b"t" * 2 * MB


def test_reads_never_list_the_folder_and_writes_list_it_once(cache, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_CACHE_MAX_MB", "1")
    listed = []
    real = cache_prune._entries
    monkeypatch.setattr(cache_prune, "_entries", lambda *a: listed.append(1) or real(*a))
    optcache.kept_bytes("statgraph", _key(cache, "a"))
    assert listed == []
    for i, name in enumerate("abc"):
        _keep(cache, "statgraph", name, 300_000, i)
        optcache.kept_bytes("statgraph", _key(cache, name))
    assert listed == [1]  # the first write: the running total after it
    _keep(cache, "statgraph", "d", 300_000, 3)
    assert listed == [1, 1]  # over the cap: listed again to choose what goes


def test_with_caching_off_nothing_is_written_or_removed(tmp_path, cache, monkeypatch):
    a = _keep(cache, "statgraph", "a", 1000, 0)
    before = _left(cache)
    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", "off")
    monkeypatch.setenv("ATTNVIZ_CACHE_MAX_MB", "0")
    f = tmp_path / "m.onnx"
    f.write_bytes(b"x" * 5000)
    assert it.sha256_model(f) == hashlib.sha256(b"x" * 5000).hexdigest()
    assert _left(cache) == before and a.stat().st_mtime == OLD


@pytest.mark.parametrize(("given", "mb"), [("", 512), (" ", 512), ("64", 64), (" 64 ", 64), ("0", 0), ("1.5", 1.5)])
def test_the_cap_setting(monkeypatch, given, mb):
    monkeypatch.setenv("ATTNVIZ_CACHE_MAX_MB", given)
    assert cache_prune.max_bytes() == int(mb * MB)


@pytest.mark.parametrize("given", ["lots", "-5", "2G", "nan", "inf"])
def test_an_invalid_cap_is_refused_in_one_line_at_the_first_use_of_the_cache(cache, monkeypatch, given):
    """Not quietly 512 MB: the line names the variable, the value and the fix, as for the ATTNVIZ_MAX_* limits."""
    monkeypatch.setenv("ATTNVIZ_CACHE_MAX_MB", given)
    with pytest.raises(AttnvizError) as refused:
        optcache.folder()
    assert str(refused.value) == (
        f"ATTNVIZ_CACHE_MAX_MB={given!r}: give the cache folder's size cap in MB, 0 or more (e.g. 512), "
        "or unset it for 512"
    )
    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", "off")  # nothing kept: the cap is not read
    assert optcache.folder() is None


def test_a_corpus_run_refuses_an_invalid_cap_before_any_work_with_exit_2_and_one_line(tmp_path):
    model = tiny_text_model(tmp_path / "m.onnx")
    texts = tmp_path / "t.txt"
    texts.write_text("the cat sat\na dog ran home\n")
    cache, out = tmp_path / "cache", tmp_path / "out"
    env = {"ATTNVIZ_CACHE_DIR": str(cache), "ATTNVIZ_CACHE_MAX_MB": "2G"}
    rc, err = run_cli("corpus", model, "--texts", texts, "--out", out, env=env)
    assert rc == 2
    assert err.splitlines() == [
        "attnviz: error: ATTNVIZ_CACHE_MAX_MB='2G': give the cache folder's size cap in MB, 0 or more (e.g. 512), "
        "or unset it for 512"
    ]
    assert not out.exists() and not cache.exists()


def test_an_unlisted_kind_is_refused(cache):
    with pytest.raises(ValueError, match="not in optcache.KINDS"):
        optcache.keep_bytes("elsewhere", _key(cache, "a"), b"x")


def _temp(folder, name, size, age_s):
    """A write's temporary file as core/writes.atomic_path names it (``.<entry>.<random>.tmp``), last written
    ``age_s`` seconds ago; its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f".{name}.k1ll3d_0.tmp"
    path.write_bytes(b"t" * size)
    when = time.time() - age_s
    os.utime(path, (when, when))
    return path


def test_a_killed_writes_temporary_file_is_removed_once_a_day_old(cache):
    entry_name = hashlib.sha256(b"x").hexdigest()
    killed = _temp(cache / "statgraph", entry_name, 3 * MB, 2 * DAY)  # a write killed two days ago
    killed_graph = _temp(cache / "optimized", entry_name + ".onnx", 3 * MB, DAY + 600)
    recent = _temp(cache / "probe", entry_name, 1000, DAY - 600)  # younger than a day: a write perhaps still going
    a = _keep(cache, "statgraph", "a", 1000, 0)  # a process's first write lists the folder
    assert not killed.exists() and not killed_graph.exists()
    assert recent.exists() and a.exists()


def test_a_write_in_flight_counts_towards_the_cap_and_keeps_its_file(cache, monkeypatch):
    """A write of another process, between its temporary file and its rename, while this one prunes the folder: a
    long one (an hour), so older than the entry this process writes meanwhile; it is counted, and never removed."""
    monkeypatch.setenv("ATTNVIZ_CACHE_MAX_MB", "1")
    old = _path(cache, "statgraph", "old")  # an entry an earlier command kept
    old.parent.mkdir(parents=True)
    old.write_bytes(b"o" * 100_000)
    os.utime(old, (OLD, OLD))
    entry = _path(cache, "memory", "in flight")
    entry.parent.mkdir()
    with atomic_path(entry) as tmp:
        tmp.write_bytes(b"f" * 700_000)
        an_hour_ago = time.time() - 3600
        os.utime(tmp, (an_hour_ago, an_hour_ago))
        optcache.keep_bytes("statgraph", _key(cache, "b"), b"b" * 300_000)  # this process's first write: 1.1 MB
        # over the cap: the oldest go until the folder is under 3/4 MB, the write in flight counted but left
        assert tmp.read_bytes() == b"f" * 700_000
        assert not old.exists() and not _path(cache, "statgraph", "b").exists()
    assert entry.read_bytes() == b"f" * 700_000  # published: its temporary file was not taken


@pytest.mark.skipif(os.name != "posix", reason="symbolic links")
def test_only_temporary_files_directly_in_the_kind_folders_are_removed_and_links_never(tmp_path, cache):
    name = hashlib.sha256(b"x").hexdigest()
    outside = tmp_path / "outside"
    target = _temp(outside, name, 1000, 2 * DAY)  # a temporary file's name and age, outside the cache
    cache.mkdir(mode=0o700)
    beside = [_temp(cache, name, 1000, 2 * DAY), _temp(cache / "mine", name, 1000, 2 * DAY)]  # not a kind folder
    (cache / "probe").symlink_to(outside, target_is_directory=True)  # a link in a kind folder's place
    link = cache / "statgraph" / f".{name}.l1nk_000.tmp"
    link.parent.mkdir()
    link.symlink_to(target)  # a link with a temporary file's name, itself two days old
    os.utime(link, (OLD, OLD), follow_symlinks=False)
    killed = _temp(cache / "statgraph", name, 1000, 2 * DAY)
    others = [p for p in _left(cache) if p != killed.relative_to(cache).as_posix()]

    a = _keep(cache, "statgraph", "a", 1000, 0)
    assert not killed.exists()
    assert _left(cache) == sorted([*others, a.relative_to(cache).as_posix()])
    assert all(p.exists() for p in beside) and target.read_bytes() == b"t" * 1000 and link.is_symlink()


def test_a_file_removed_meanwhile_is_skipped_alone_and_the_rest_of_its_folder_still_counts(cache, monkeypatch):
    """Another process pruning removes a file after this listing read its name: only that file drops out."""
    paths = [_keep(cache, "statgraph", name, 1000, n) for n, name in enumerate("abc")]
    real = os.scandir

    class Racing:  # os.scandir whose first file is removed just before the listing looks at it
        def __init__(self, folder):
            self.listed = real(folder)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.listed.close()

        def __iter__(self):
            for n, e in enumerate(self.listed):
                if n == 0:
                    os.unlink(e.path)
                yield e

    with monkeypatch.context() as m:
        m.setattr(cache_prune.os, "scandir", Racing)
        listed = cache_prune._entries(cache, ["statgraph"])
    left = [str(p) for p in paths if p.exists()]
    assert len(left) == 2
    assert sorted(path for _, path, _, _ in listed) == sorted(left)
