"""A corpus worker asks where its sessions run (runtime/device.before_session: for ``auto``, a stat of onnxruntime's
build, the model's hash and a record read) once per command's setup in its process (engines._device, keyed by the
setup's token), where it asked at each of its questions (3-4 for a worker's setup); again only where this process
kept or forgot where ``auto`` lands meanwhile, so every answer is the one a fresh ask gives.  The worker's own
entry points run here in-process, each with its own unpickled copy of the setup, as the pool's tasks get it."""

from __future__ import annotations

import dataclasses
import hashlib
import pickle

import pytest

from attnviz.corpus import engines
from attnviz.runtime import device, isolation, landings


@pytest.fixture
def asked(monkeypatch):
    """Each ``before_session`` call of engines._device (model, provider, answer), the real function answering."""
    calls = []
    real = device.before_session

    def counted(model, provider, kept=True):
        out = real(model, provider, kept)
        calls.append((model, provider, out))
        return out

    monkeypatch.setattr(device, "before_session", counted)
    monkeypatch.setattr(isolation, "gpu_present", lambda: False)  # the same answers on a GPU machine
    monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")  # as in a pool process (engines._enter_worker)
    monkeypatch.setattr(engines, "_PROBED", None)
    monkeypatch.setattr(engines, "_REDUCER", None)
    return calls


def _copy(setup):
    return pickle.loads(pickle.dumps(setup))  # what a pool task receives


@pytest.mark.parametrize("provider", ["cpu", "auto"])
def test_a_workers_setup_asks_once(planted, tmp_path, monkeypatch, asked, provider):
    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", str(tmp_path / "cache"))
    model = str(planted[0])
    setup = engines.WorkerSetup(model, provider, None, 1, 5, (), 2)
    engines._probe(_copy(setup))  # the driver's probe, in the first process
    engines._warm_up(_copy(setup))  # its warm-up, over the model it probed
    red = engines._REDUCER
    assert red is not None and red.heads_known
    again = engines._own_reducer(_copy(setup), warm=False)  # a reducer built again (a batch's other groups)
    assert again.model is not red.model
    for s in (setup, _copy(setup)):  # the questions themselves, each answered as before_session answers
        assert engines._device_known(s) and not engines._by_record(s) and engines._device(s) == "cpu"
    assert asked == [(model, provider, "cpu")]  # once, for every copy of the setup (each task's)


def test_another_setup_or_a_landing_kept_or_forgotten_asks_again(planted, asked):
    model = str(planted[0])
    first = engines.WorkerSetup(model, "auto", None, 1, 5, (), 2)
    second = engines.WorkerSetup(model, "auto", None, 1, 5, (), 2)  # the next command's: another token
    assert first == second and first.asked != second.asked  # compared as before (WarmPool.fits), asked apart
    assert dataclasses.replace(first, kind="encoder").asked == first.asked  # the driver's setup after its probe
    for s in (first, first, second, second):
        engines._device(s)
    assert len(asked) == 2
    landings.changed()  # as light_model.keep_probe / forget_landing do where ``auto`` landed
    engines._device(first)
    engines._device(first)
    assert len(asked) == 3


def test_keeping_and_forgetting_where_auto_landed_is_counted(planted, monkeypatch, tmp_path):
    """light_model's record of where ``auto`` landed, kept and forgotten: each counted (engines._device asks again);
    a probe kept for ``cpu`` is no such record."""
    from attnviz.runtime import light_model, open_model, optcache
    from attnviz.runtime import probe_kept as pk

    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()  # as an earlier command made it, having hashed the model
    path = planted[0]
    optcache.remember_sha256(path, hashlib.sha256(path.read_bytes()).hexdigest(), optcache.stat_key(path))
    for provider, counted in (("cpu", 0), ("auto", 1)):
        m = open_model(str(path), provider=provider)
        m.probe()
        assert light_model._key(m.path, provider, ["probe"]) is not None  # a record is really written
        before = landings.count()
        light_model.keep_probe(m, pk.KeptProbe(m.probe_state(), m.provider))
        assert landings.count() - before == counted
    before = landings.count()
    light_model.forget_landing(path)
    assert landings.count() == before + 1


@pytest.mark.parametrize("carried", [True, False], ids=["as-local_engine-sends-it", "the-runs-own-token"])
def test_the_early_pools_probing_process_asks_once_for_the_command(planted, tmp_path, monkeypatch, asked, carried):
    """The command starts its pool on a setup of its own (prestart; the first process answers the probe) and plans
    the run's later (another token).  The reducer that process's first batch builds (engines._work, less the
    process's own set-up), for the run's setup as local_engine sends it (engines.carried: the pool's token), asks
    no more; for the run's own token it asked again (before)."""
    from attnviz.corpus.reduce import BatchReducer, layout

    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", str(tmp_path / "cache"))
    model = str(planted[0])
    groups = tuple(layout(BatchReducer(model, "cpu", None, 1, 5).model.sites))
    early = engines.WorkerSetup(model, "auto", None, 1, 5, (), 2)  # prestart's
    run = engines.WorkerSetup(model, "auto", None, 1, 5, groups, 2)  # the run's
    engines._probe(_copy(early))  # the driver's probe, in the pool's first process
    sent = engines.carried(run, early) if carried else run
    assert sent == run  # the same setup otherwise
    red = engines._own_reducer(_copy(sent), warm=False)
    assert red.groups == list(groups)
    assert len(asked) == (1 if carried else 2)
