"""The driver's side of a corpus run: flat token arrays, no items held during the run, early worker start."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import numpy as np
import pytest

from attnviz import AttnvizError
from attnviz.corpus import CorpusConfig, engines, run_corpus
from attnviz.corpus.fold import layout
from attnviz.corpus.graph_reduce import InGraphReducer
from attnviz.corpus.items import Item
from attnviz.corpus.output import read
from attnviz.corpus.plan import Encoded, plan_text


def _cfg(model, texts, out, **kw):
    kw.setdefault("workers", 1)
    kw.setdefault("batch_size", 6)
    return CorpusConfig(model=str(model), texts=str(texts), out=str(out), progress=False, provider="cpu", **kw)


def test_plan_from_flat_tokens_is_the_length_sorted_right_padded_batches():
    rng = np.random.default_rng(5)
    rows = [list(rng.integers(1, 999, int(n))) for n in rng.integers(1, 9, 23)]
    types = [[i % 2 for i in range(len(r))] for r in rows]
    special = [[i == 0 for i in range(len(r))] for r in rows]
    items = [Item(100 + i, text=str(i)) for i in range(len(rows))]  # Item.index is not the position
    enc = Encoded.from_lists(rows, types, special)
    assert len(enc) == 23 and enc.ids.dtype == np.int32 and list(enc.lengths) == [len(r) for r in rows]
    specs = plan_text(items, enc, None, None, batch_size=4, equal_lengths=False)
    # by hand: stable sort by length, cut every 4, pad with zeros on the right
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    assert [s.items for s in specs] == [[100 + i for i in order[k : k + 4]] for k in range(0, 23, 4)]
    for s in specs:
        width = max(len(rows[i - 100]) for i in s.items)
        assert s.ids is not None and s.type_ids is not None and s.special is not None and s.lengths is not None
        assert s.ids.shape == (len(s.items), width)
        for r, i in enumerate(s.items):
            n = len(rows[i - 100])
            assert s.lengths[r] == n
            assert list(s.ids[r]) == rows[i - 100] + [0] * (width - n)
            assert list(s.type_ids[r]) == types[i - 100] + [0] * (width - n)
            assert list(s.special[r]) == special[i - 100] + [False] * (width - n)
    same = plan_text(items, rows, types, special, batch_size=4, equal_lengths=False)  # per-item lists: the same
    assert all(np.array_equal(a.ids, b.ids) and a.items == b.items for a, b in zip(specs, same))


def test_examples_carry_the_texts_read_again_after_the_run(planted, tmp_path):
    model, texts = planted
    run_corpus(_cfg(model, texts, tmp_path / "out"))
    lines = [x for x in Path(texts).read_text().splitlines() if x.strip()]
    ex = read(tmp_path / "out").examples
    assert ex and all(e["text"] == lines[e["item"]] for e in ex)


def test_a_corpus_file_changed_during_the_run_is_one_line_and_writes_no_results(planted, tmp_path):
    model, texts = planted
    copy = tmp_path / "corpus.txt"
    copy.write_text(Path(texts).read_text())

    def edit(done):
        if done >= 6:
            copy.write_text(copy.read_text().replace("a", "b"))

    with pytest.raises(AttnvizError, match="changed during the run") as e:
        run_corpus(_cfg(model, copy, tmp_path / "out"), on_batch=edit)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "out" / "heads.parquet").exists() and not (tmp_path / "out" / "examples.parquet").exists()


def test_the_early_pool_runs_the_batches_and_no_worker_outlives_the_run(planted, tmp_path, monkeypatch):
    model, texts = planted
    started = []
    real = engines.WarmPool.start.__func__  # type: ignore[attr-defined]

    def start(cls, setup, processes, **kw):
        started.append(setup)
        return real(cls, setup, processes, **kw)

    monkeypatch.setattr(engines.WarmPool, "start", classmethod(start))
    run_corpus(_cfg(model, texts, tmp_path / "one", workers=2, threads=1))
    assert len(started) == 1  # the pool started before planning fitted: local_engine started no second one
    assert mp.active_children() == []


def test_an_error_after_the_early_start_leaves_no_worker(planted, tmp_path):
    model, _texts = planted
    images = tmp_path / "imgs"
    images.mkdir()
    cfg = CorpusConfig(model=str(model), images=str(images), out=str(tmp_path / "o"), progress=False, provider="cpu")
    with pytest.raises(AttnvizError, match="give --texts"):  # found after the probe: the workers were started
        run_corpus(cfg)
    assert mp.active_children() == []


def test_an_unknown_word_names_the_item_it_is_in(tmp_path, capsys):
    """In a corpus of thousands of lines the word alone does not say where to look: the item's number (blank
    lines skipped), its line in the file and the start of its text come with it."""
    from attnviz.cli import main

    model = Path(__file__).resolve().parents[2] / "models" / "sequence-classification.onnx"
    texts = tmp_path / "digits.txt"
    texts.write_text("1 2 3\n\n7 7 7\n4 5 x 6 " + "1 " * 30 + "\n")
    code = main(["corpus", str(model), "--texts", str(texts), "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    head = "4 5 x 6 " + "1 " * 16  # the first 40 characters, then an ellipsis
    assert code == 2 and len(err) == 1
    assert err[0].startswith(
        f"attnviz: error: corpus item 2 (line 4) {head + '…'!r}: unknown token 'x': not in the model"
    )
    assert not (tmp_path / "o").exists()


def test_generate_on_a_model_that_generates_nothing_is_one_line(tmp_path, capsys):
    """Only an encoder-decoder without targets generates in a corpus run; elsewhere a typed --generate would be
    ignored without a word."""
    from attnviz.cli import main

    model = Path(__file__).resolve().parents[2] / "models" / "sequence-classification.onnx"
    texts = tmp_path / "digits.txt"
    texts.write_text("1 2 3\n7 7 7\n")
    out = tmp_path / "o"
    code = main(["corpus", str(model), "--texts", str(texts), "--generate", "5", "--out", str(out), "--no-progress"])
    assert code == 2 and capsys.readouterr().err.strip().splitlines() == [
        "attnviz: error: --generate 5: sequence-classification.onnx is an encoder model and generates nothing in a "
        "corpus run (only an encoder-decoder without targets does); drop --generate"
    ]
    assert not out.exists()


def test_a_series_model_is_told_apart_from_a_text_model_with_odd_inputs(tmp_path, capsys):
    """A forecasting model is not a text model to re-export: the line says what it takes and where to look at it."""
    from attnviz.cli import main

    model = Path(__file__).resolve().parents[2] / "models" / "forecasting.onnx"
    texts = tmp_path / "digits.txt"
    texts.write_text("1 2 3\n7 7 7\n")
    out = tmp_path / "o"
    code = main(["corpus", str(model), "--texts", str(texts), "--out", str(out), "--no-progress"])
    assert code == 2 and capsys.readouterr().err.strip().splitlines() == [
        "attnviz: error: forecasting.onnx takes a numeric series (input 'series'), and corpus analysis takes text or "
        "image models; look at a series model with attnviz open, attnviz figure or attnviz extract --inputs FEEDS.npz"
    ]
    assert not out.exists()


def test_an_input_a_corpus_cannot_fill_keeps_the_export_advice():
    from types import SimpleNamespace

    from attnviz.corpus.plan import check_model

    inputs = [SimpleNamespace(name="input_ids"), SimpleNamespace(name="past_key_values.0.key")]
    roles = {"input_ids": "tokens", "past_key_values.0.key": "past"}
    model = SimpleNamespace(kind="decoder", roles=roles, inputs=inputs, path=Path("gpt.onnx"))
    with pytest.raises(AttnvizError) as e:
        check_model(model)
    assert str(e.value) == (
        "input 'past_key_values.0.key' (past) cannot be filled for a corpus run; export the model with token / mask / "
        "type / position inputs only (no KV cache)"
    )


@pytest.mark.parametrize("which", ["encoder", "decoder"])
def test_a_probe_in_a_worker_leaves_the_driver_model_as_its_own_probe_would(which, planted, tmp_path, monkeypatch):
    """engines._probe (the pool task) counts the heads and confirms the stacks as the driver's own probe would;
    the driver's model takes that over (Model.adopt_probe) and reads the same sites, kind and provider."""
    from planted_induction import planted_induction_model

    from attnviz.runtime import open_model

    model = planted[0] if which == "encoder" else planted_induction_model(tmp_path / "induction.onnx")
    monkeypatch.setattr(engines, "_PROBED", None)  # the probed model this process keeps goes with the test
    state, provider = engines._probe(engines.WorkerSetup(str(model), "cpu", None, 1, 5, (), 1))
    own = open_model(str(model), provider="cpu")
    own.probe()
    driver = open_model(str(model), provider="cpu")
    before = driver.probe_state()
    assert before != state  # heads unknown until a run: there is something to take over
    assert not driver.adopt_probe((True, True, state[2][:-1]))  # another model's sites: refused, nothing changed
    assert driver.probe_state() == before
    assert driver.adopt_probe(state)
    assert driver.probe_state() == own.probe_state()
    assert (driver.sites, driver.kind) == (own.sites, own.kind)
    assert driver.kind == which and all(s.heads > 0 for s in driver.sites)
    assert provider == own.provider == "CPUExecutionProvider"


@pytest.mark.parametrize("first", ["warm-up", "batch"])
@pytest.mark.parametrize("device", ["cpu", "not known before a session"])
def test_the_worker_that_probed_opens_and_probes_the_model_once(first, device, planted, monkeypatch, tmp_path):
    """The process that probes for the driver (engines._probe) builds its reducer over the model it probed, whether
    its warm-up builds it or (the other process took both warm-ups) its first batch: one model opened and one
    probe's session in the process, not a second model (nor, from its first batch, a second probe).  ``not known
    before a session``: ``auto`` on a GPU machine (CUDA, or the CPU without a usable CUDA build), whose probe's
    session stays open until the statistics session, laid out for the device that session says, replaces it (here
    the CPU's, standing in); with ``cuda`` asked for, the device is known, as with ``cpu``."""
    from attnviz.runtime import model as rm
    from attnviz.runtime import open_model

    model, _texts = planted
    if device != "cpu":
        monkeypatch.setattr(engines, "_device", lambda setup: None)
    monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")  # as in a pool process (engines._enter_worker)
    # nothing kept by other tests' commands on this model: a worker with a kept probe and statistics session
    # opens no model at all (runtime/light_model.py, tests/corpus/test_light_worker.py)
    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(engines, "_PROBED", None)
    monkeypatch.setattr(engines, "_REDUCER", None)
    opened, sessions = [], []
    init, make = rm.AttentionModel.__init__, rm.make_session

    def counted_init(self, *a, **kw):
        opened.append(self)
        init(self, *a, **kw)

    def counted_make(data, *a, **kw):
        sessions.append(bool(kw.get("finite")))  # True: a dense session (its maps checked for NaN/Inf)
        return make(data, *a, **kw)

    monkeypatch.setattr(rm.AttentionModel, "__init__", counted_init)
    monkeypatch.setattr(rm, "make_session", counted_make)
    setup = engines.WorkerSetup(str(model), "cpu", None, 1, 5, (), 2)
    state, _provider = engines._probe(setup)
    own = open_model(str(model), provider="cpu")
    own.probe()
    assert state == own.probe_state()
    del opened[1:], sessions[1:]  # the reference model's
    driver = engines.WorkerSetup(str(model), "cpu", None, 1, 5, tuple(layout(own.sites)), 2, kind=own.kind)
    if first == "warm-up":
        engines._warm_up(setup)  # before the driver planned: its setup has no groups yet
        red = engines._REDUCER
    else:
        red = engines._own_reducer(driver, warm=False)  # as engines._work builds it (and then compares the groups)
    assert red is not None and red.model is opened[0] and len(opened) == 1
    assert sessions == [True, False]  # the probe's session, then the statistics session: no second probe
    assert red.heads_known and red.groups == list(driver.groups) and red.kind == own.kind
    assert isinstance(red.in_graph, InGraphReducer) and engines._PROBED is None  # taken over once
    assert red.model.open_provider == "CPUExecutionProvider" and "dense" not in red.model._sessions  # replaced
    again = engines._own_reducer(driver, warm=False)  # a reducer built again (other groups) opens its own
    assert again.model is not red.model and len(opened) == 2


def test_a_cpu_text_run_probes_in_a_worker_and_starts_no_isolation_child(planted, tmp_path, monkeypatch):
    """The isolation child is the driver's only for its probe: a worker probes instead (its onnxruntime already
    imported) and the results are byte for byte those of a run whose driver probed in its child."""
    from attnviz.runtime import host

    model, texts = planted
    host.shutdown()
    run_corpus(_cfg(model, texts, tmp_path / "worker", workers=2, threads=1))
    assert host._host is None
    assert mp.active_children() == []
    monkeypatch.setattr(engines.WarmPool, "probes", lambda self: False)  # as before: the driver's own probe
    run_corpus(_cfg(model, texts, tmp_path / "driver", workers=2, threads=1))
    assert host._host is not None
    for name in ("heads.parquet", "examples.parquet"):
        assert (tmp_path / "worker" / name).read_bytes() == (tmp_path / "driver" / name).read_bytes()


def test_a_close_that_does_not_wait_leaves_the_workers_exit_to_the_next_close(planted):
    model, _texts = planted
    warm = engines.WarmPool.start(engines.WorkerSetup(str(model), "cpu", None, 1, 5, (), 1), 1)
    warm.pool.submit(engines._ready).result()  # a process is up
    procs = list(warm.pool._processes.values())
    warm.close(kill=True, wait=False)
    assert len(warm.exiting) == 1  # the pool's manager thread, which reaps the processes
    warm.close(kill=True)  # as run_corpus closes its early pool after writing the results
    assert warm.exiting == [] and not any(p.is_alive() for p in procs) and mp.active_children() == []


def test_a_pool_that_probes_first_answers_the_probe_it_queued_and_starts_no_extra_process(planted):
    """WarmPool.start(probe=True) queues the probe ahead of the warm-ups (the first process up answers it while
    the other opens its session); the probe is the driver's own, and a pool of fewer processes than workers (a
    tiny corpus) queues nothing extra, since one more task than processes would start one more process."""
    from attnviz.runtime import open_model

    model, _texts = planted
    setup = engines.WorkerSetup(str(model), "cpu", None, 1, 5, (), 2)
    own = open_model(str(model), provider="cpu")
    own.probe()
    warm = engines.WarmPool.start(setup, 2, probe=True)
    try:
        job = warm.probing
        assert job is not None and warm.probe() is job and warm.probing is None
        assert job.result() == (own.probe_state(), own.provider)
        assert len(warm.pool._processes) == 2
        again = warm.probe()  # asked again: a new task, answered as well
        assert again is not job and again.result() == job.result()
    finally:
        warm.close(kill=True)
    tiny = engines.WarmPool.start(setup, 1, probe=True)
    try:
        assert tiny.probing is None and len(tiny.pool._processes) == 1
        assert tiny.probe().result() == job.result()
    finally:
        tiny.close(kill=True)
    assert mp.active_children() == []


def test_a_model_hash_given_up_on_ends_at_its_next_read(tmp_path):
    import hashlib
    import os
    import threading

    from attnviz.corpus import items as it

    f = tmp_path / "m.onnx"
    f.write_bytes(os.urandom(3 << 20))
    stop = threading.Event()
    assert it.sha256_model(f, stop) == hashlib.sha256(f.read_bytes()).hexdigest()
    stop.set()
    with pytest.raises(it.HashStopped):
        it.sha256_model(f, stop)
    with pytest.raises(it.HashStopped):
        it.sha256_model(tmp_path, stop)  # a folder's files too


def test_the_command_starts_the_pool_the_run_takes_and_stops_one_nobody_took(planted, tmp_path, monkeypatch):
    """``attnviz corpus`` starts its workers before it imports the run (corpus/prestart.py): ``run_corpus`` takes
    that very pool (no second start) and writes what a run that started its own writes; a pool the run never took
    (an import that failed in between) is stopped on the way out, and bad settings start nothing."""
    from attnviz.corpus import prestart

    model, texts = planted
    pools = []
    real = engines.WarmPool.start.__func__  # type: ignore[attr-defined]

    def start(cls, setup, processes, **kw):
        pools.append(real(cls, setup, processes, **kw))
        return pools[-1]

    monkeypatch.setattr(engines.WarmPool, "start", classmethod(start))
    run_corpus(_cfg(model, texts, tmp_path / "own", workers=2, threads=1))
    assert len(pools) == 1
    cfg = _cfg(model, texts, tmp_path / "early", workers=2, threads=1)
    with prestart.started(cfg):
        assert len(pools) == 2 and pools[1].pool._processes  # started before the run is called
        run_corpus(cfg)
    assert len(pools) == 2  # the run took it
    for name in ("heads.parquet", "examples.parquet"):
        assert (tmp_path / "early" / name).read_bytes() == (tmp_path / "own" / name).read_bytes()
    assert mp.active_children() == []

    with pytest.raises(ImportError), prestart.started(_cfg(model, texts, tmp_path / "x", workers=2, threads=1)):
        assert pools[2].pool._processes
        raise ImportError("the run's modules")
    assert mp.active_children() == [] and prestart.take(cfg) is None

    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "heads.parquet").write_text("my corpus")
    for bad, message in (
        (_cfg(model, texts, tmp_path / "z", batch_size=0), "--batch-size must be 1 or more"),
        (_cfg(model, tmp_path / "y" / "heads.parquet", tmp_path / "y"), "heads.parquet"),  # a result replaces it
    ):
        with pytest.raises(AttnvizError, match=message), prestart.started(bad):
            raise AssertionError("not reached")
    assert len(pools) == 3  # refused before a pool started
    assert (tmp_path / "y" / "heads.parquet").read_text() == "my corpus"


def test_the_texts_are_read_again_while_the_last_batch_runs(planted, tmp_path, monkeypatch):
    """The examples' texts are read again (and checked against the planned corpus) once fewer batches are left
    than workers, while a worker's core is idle, not after the last batch on the command's tail; the results are
    the bytes of a run with one worker (which reads them after its last batch, as before)."""
    from attnviz.corpus import run as corpus_run
    from attnviz.corpus.reduce import Accumulator

    model, texts = planted
    events: list[tuple[str, int]] = []
    read_again, fold = corpus_run._read_again, Accumulator.fold

    def spy_read(cfg, data_sha, specs):
        events.append(("read", -1))
        return read_again(cfg, data_sha, specs)

    def spy_fold(self, p):
        events.append(("fold", p.batch_id))
        return fold(self, p)

    monkeypatch.setattr(corpus_run, "_read_again", spy_read)
    monkeypatch.setattr(Accumulator, "fold", spy_fold)
    run_corpus(_cfg(model, texts, tmp_path / "two", workers=2, threads=1))
    folds = [b for e, b in events if e == "fold"]
    assert events.count(("read", -1)) == 1 and len(folds) == 7  # 40 items in batches of 6
    assert events.index(("read", -1)) < events.index(("fold", 6))  # before the last batch was folded
    events.clear()
    run_corpus(_cfg(model, texts, tmp_path / "one", workers=1))
    assert events[-1] == ("read", -1) and events.count(("read", -1)) == 1
    for name in ("heads.parquet", "examples.parquet"):
        assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()
