"""``--engine ray``: Ray Data reads the file, tokenises, batches with padding and writes the partials Parquet;
the results equal the local engine's (within 1e-6; another item only where float noise reorders a tie).

Ray starts once for this module (its start-up is most of the cost on a small machine)."""

import json
from pathlib import Path

import numpy as np
import pytest
from onnx_builders import tiny_text_model
from planted import corpus_lines
from test_engines import _assert_same, _cfg, _table

from attnviz.cli import main
from attnviz.corpus import run_corpus
from attnviz.corpus.ray_engine import PARTIALS

pytest.importorskip("ray")
pytest.importorskip("ray.data")


pytestmark = pytest.mark.usefixtures("ray_local")  # the folder's one cluster (conftest.py)


def _both(model, texts, tmp_path, name, **kw):
    run_corpus(_cfg(model, texts, tmp_path / f"{name}_local", **kw))
    run_corpus(_cfg(model, texts, tmp_path / f"{name}_ray", engine="ray", threads=1, **kw))
    run = json.loads((tmp_path / f"{name}_ray" / "run.json").read_text())
    assert run["engine"] == "ray" and "ray" in run["versions"]
    assert run["data_sha256_of"] == "file"  # Ray Data read it: the driver never held the items
    # Ray places its actors itself: no local layout; an actor and its session a worker, one batch at a time each
    assert (run["worker_layout"], run["sessions"], run["batches_per_session"]) == (None, run["workers"], 1)
    assert not (tmp_path / f"{name}_ray" / PARTIALS).exists()
    _assert_same(_table(tmp_path / f"{name}_local"), _table(tmp_path / f"{name}_ray"), tol=1e-6)
    return run


def test_ray_data_txt_two_actors_equal_local(planted, tmp_path):
    model, texts = planted
    run = _both(model, texts, tmp_path, "two", workers=2)  # the local side: a pool of 2 workers
    assert run["workers"] == 2 and run["items"] == 40


def test_ray_data_jsonl_pairs_blank_rows_and_max_items(planted, tmp_path):
    model, _ = planted
    lines = corpus_lines(30, seed=4)
    # the planted model takes 24 positions: [CLS] A [SEP] B [SEP] stays within them
    recs = [{"text": " ".join(t.split()[:12]), "b": " ".join(lines[-1 - i].split()[:7])} for i, t in enumerate(lines)]
    recs.insert(3, {"text": "   ", "b": "the"})  # skipped by both engines: item numbers stay aligned
    f = tmp_path / "c.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    run = _both(model, f, tmp_path, "jsonl", pair_column="b", max_items=25)
    assert run["items"] == 25


def test_ray_data_parquet_equals_local(planted, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    model, texts = planted
    pq.write_table(pa.table({"text": texts.read_text().splitlines()}), tmp_path / "c.parquet")
    _both(model, tmp_path / "c.parquet", tmp_path, "pq")


def test_ray_streams_a_quoted_tsv_as_the_local_engine_reads_it(planted, tmp_path, capsys):
    """A .tsv is read in a Ray read task by the local reader itself (ray_engine._lines_source): the same items,
    indices, statistics and result bytes as the local engine (which gives the .jsonl's bytes:
    tests/corpus/test_delimited.py); its refusals are the local reader's one line (a bad row past the first item:
    the read task's, Ray's wrapping taken off); and an item the tokenizer refuses names the line an editor shows,
    after a quoted multi-line field, as locally."""
    from test_delimited import _planted_recs, _write

    from attnviz.corpus.items import read_texts
    from attnviz.corpus.ray_engine import _lines_source

    model, _ = planted
    f, _ = _write(tmp_path, "c.tsv", ["text", "b", "note"], _planted_recs(), bom=True, crlf=True, blank_after=3)
    run = _both(model, f, tmp_path, "tsv", pair_column="b", max_items=11, batch_size=4)
    assert run["items"] == 11
    for name in ("heads.parquet", "examples.parquet"):
        assert (tmp_path / "tsv_ray" / name).read_bytes() == (tmp_path / "tsv_local" / name).read_bytes(), name
    # a corpus past one block (here 300 characters) is yielded a block at a time, the items the local reader's
    src = _lines_source(str(f), "b", block_chars=300)
    with open(f, "rb") as fh:
        blocks = list(src._read_stream(fh, str(f)))
    cols = [[v for b in blocks for v in b.column(c).to_pylist()] for c in ("text", "b", "where")]
    assert len(blocks) > 2 and [*zip(*cols)] == [(it.text, it.pair, it.where) for it in read_texts(f, "b")]
    out = tmp_path / "o"
    args = [
        "corpus",
        str(model),
        "--texts",
        "",
        "--out",
        str(out),
        "--engine",
        "ray",
        "--no-progress",
        "--workers",
        "1",
    ]
    for name, data, says in (
        ("bad.tsv", b'text\tb\nthe\tcat\n"the\tdog\n', "bad.tsv line 3: a quote"),
        ("mac.tsv", b"text\tb\rthe\tcat\r", "mac.tsv line 1: a carriage return (CR, column 7)"),
        (
            "zebra.csv",
            b'text,note\r\nthe cat,"one\r\ntwo\nthree"\r\n\r\nthe zebra,x\r\n',
            "item 1 (line 6) 'the zebra'",
        ),
    ):
        (tmp_path / name).write_bytes(data)
        args[3] = str(tmp_path / name)
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
        assert not out.exists() or name == "zebra.csv"  # (a refused item: Ray had started, its partials are gone)
    assert not (out / PARTIALS).exists()


def test_the_driver_reads_a_tsvs_header_only_and_the_read_task_refuses_a_later_row(
    planted, tmp_path, capsys, monkeypatch
):
    """Session 20 parsed a .tsv twice: all of it in the driver's check, then again in the read task.  The driver
    now draws the header and one item (counted here, in the driver's process: the read task runs in a Ray worker,
    which this counter does not reach); a bad row 300 lines down is still one line naming it, from the read task,
    and leaves no results folder; a missing column is still refused before Ray reads anything."""
    from attnviz.corpus import ray_engine

    drawn = []
    real = ray_engine._rows_of

    def counted(f, path, pair_column):
        for row in real(f, path, pair_column):
            drawn.append(row)
            yield row

    monkeypatch.setattr(ray_engine, "_rows_of", counted)
    model, _ = planted
    rows = ["text\tb"] + [f"{' '.join(t.split()[:8])}\tthe cat" for t in corpus_lines(400, seed=7)]
    rows[300] = "the cat\tsat\textra"  # line 301: three fields under a header of two
    f = tmp_path / "late.tsv"
    f.write_text("\n".join(rows) + "\n")
    out = tmp_path / "o"
    args = ["corpus", str(model), "--texts", str(f), "--out", str(out), "--engine", "ray", "--no-progress"]
    assert main([*args, "--workers", "1", "--text-pair-column", "b"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("attnviz: error: ") and "late.tsv line 301" in err[0], err
    assert len(drawn) == 1 and not out.exists()
    drawn.clear()
    assert main([*args, "--workers", "1", "--text-pair-column", "pair"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--text-pair-column pair" in err[0] and not out.exists(), err
    assert drawn == []  # refused at the header


def test_ray_actor_cuts_equal_length_batches_and_decoders_see_raw_text(tmp_path):
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(corpus_lines(20, seed=5)) + "\n")
    enc = tiny_text_model(tmp_path / "enc.onnx")  # no mask input: a padded batch would change every row
    _both(enc, texts, tmp_path, "enc", batch_size=8)
    lm = tiny_text_model(tmp_path / "lm.onnx", causal=True, classifier=False, layers=2, heads=2)
    run = _both(lm, texts, tmp_path, "lm", batch_size=4)
    assert run["model_kind"] == "decoder"


def test_ray_data_errors_are_one_line(planted, tmp_path, capsys):
    model, _ = planted
    f = tmp_path / "c.jsonl"
    f.write_text('{"sentence": "the cat"}\n')
    args = ["corpus", str(model), "--texts", str(f), "--out", str(tmp_path / "o"), "--engine", "ray", "--no-progress"]
    assert main([*args, "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("attnviz: error:") and "c.jsonl" in err[0], err
    # a file Ray Data itself cannot parse: the wrapped reader error becomes one line naming the file and the way out
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "the cat"}\n{"text": "the dog"\n')
    args[args.index("--texts") + 1] = str(bad)
    assert main([*args, "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.jsonl: Ray Data could not read or process it" in err[0], err
    assert "--engine local" in err[0]


def test_ray_drops_a_byte_order_mark_and_refuses_latin1_as_local_does(planted, tmp_path, capsys):
    """Audit 17: Ray Data read a UTF-8 mark into the first item (the local reader now drops it: equal results), and
    a Latin-1 byte is refused before Ray starts, in the local reader's line (tests/corpus/test_text_encodings.py)."""
    import codecs

    model, texts = planted
    marked = tmp_path / "marked.txt"
    marked.write_bytes(codecs.BOM_UTF8 + texts.read_bytes())
    _both(model, marked, tmp_path, "marked", batch_size=4)
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("the cat\nthe café\n".encode("latin-1"))
    out = tmp_path / "o"
    args = ["corpus", str(model), "--texts", str(latin), "--out", str(out), "--engine", "ray", "--no-progress"]
    assert main([*args, "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "latin1.txt line 2: byte 0xE9" in err[0] and "UTF-8" in err[0], err
    assert not out.exists()
    import pyarrow as pa
    import pyarrow.parquet as pq

    numbers = tmp_path / "numbers.parquet"  # was: "no items (empty lines are skipped)"
    pq.write_table(pa.table({"text": [1, 2]}), numbers)
    args[args.index("--texts") + 1] = str(numbers)
    assert main([*args, "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "column 'text' holds int64, not text" in err[0], err


def test_encoder_decoder_pairs_ray_equals_local_and_resumes(bible_gold, tmp_path):
    """Source/target pairs keep the driver's plan under Ray (the actors reduce its batches): from a .csv with gold
    alignments (--gold-column), the same result bytes -- statistics, gold AER columns, examples -- and gold link
    counts as the local engine, and an interrupted Ray run resumes from its checkpoint to the same result."""
    from pathlib import Path

    from test_delimited import _write

    from attnviz.corpus.run import CHECKPOINT

    model = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"
    recs = [json.loads(x) for x in (bible_gold / "pairs.jsonl").read_text().splitlines()]
    bible, _ = _write(tmp_path, "pairs.csv", ["gold", "en", "text"], recs, crlf=True)
    kw = dict(pair_column="en", batch_size=3, gold_column="gold")
    run_corpus(_cfg(model, bible, tmp_path / "local", **kw))

    def stop(done):
        if done >= 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_corpus(_cfg(model, bible, tmp_path / "ray", engine="ray", threads=1, **kw), on_batch=stop)
    assert (tmp_path / "ray" / CHECKPOINT).exists()
    s = run_corpus(_cfg(model, bible, tmp_path / "ray", engine="ray", threads=1, **kw))
    assert s.resumed_items == 6 and s.items == 16
    run = json.loads((tmp_path / "ray" / "run.json").read_text())
    assert run["engine"] == "ray" and run["model_kind"] == "encoder-decoder"
    assert run["worker_layout"] is None and run["worker_layout_from"] is None  # the driver's plan, Ray's actors
    for name in ("heads.parquet", "examples.parquet"):
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name
    local = json.loads((tmp_path / "local" / "run.json").read_text())
    assert run["gold"] == local["gold"] and run["gold"]["pairs"] == 16 and run["gold"]["counts"]
    import pyarrow.parquet as pq

    from attnviz.core.score_direction import GOLD_SCORES

    assert set(GOLD_SCORES) <= set(pq.read_schema(tmp_path / "ray" / "heads.parquet").names)  # the gold in the bytes


def test_ray_reads_an_image_folder_itself_equal_local(tmp_path):
    """--images: Ray Data lists and reads the folder (its own files, not sub-folders; image suffixes in any case),
    the actors decode and reduce; statistics, examples and run.json's data hash equal the local engine's."""
    from pathlib import Path

    import numpy as np
    from PIL import Image

    from attnviz.corpus import CorpusConfig
    from attnviz.corpus.output import read

    model = Path(__file__).resolve().parents[2] / "models" / "vit-classification.onnx"
    d = tmp_path / "imgs"
    (d / "sub").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in ("b.png", "a.PNG", "c.jpg", "d.png", "e.png", "sub/f.png"):
        Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(d / name)
    (d / "notes.txt").write_text("not an image")

    def cfg(out, **kw):
        return CorpusConfig(
            str(model),
            str(tmp_path / out),
            images=str(d),
            batch_size=2,
            provider="cpu",
            progress=False,
            max_items=4,
            k=3,
            **kw,
        )

    run_corpus(cfg("local", workers=1))
    run_corpus(cfg("ray", workers=1, engine="ray", threads=1))
    _assert_same(_table(tmp_path / "local"), _table(tmp_path / "ray"), tol=1e-6)
    local, ray = read(tmp_path / "local"), read(tmp_path / "ray")
    assert ray.run["items"] == local.run["items"] == 4
    assert ray.run["data_sha256"] == local.run["data_sha256"] and ray.run["data_sha256_of"] == "items"
    assert {(e["item"], Path(e["image"]).name) for e in ray.examples} == {
        (e["item"], Path(e["image"]).name) for e in local.examples
    }
    assert {Path(e["image"]).name for e in ray.examples} <= {"a.PNG", "b.png", "c.jpg", "d.png"}
    assert not (tmp_path / "ray" / PARTIALS).exists()
    for name in ("heads.parquet", "examples.parquet"):  # the one-task sort (ray24): the local engine's very bytes
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name


def test_ray_run_interrupted_by_ctrl_c_resumes_from_its_partials(planted, tmp_path):
    """A real Ctrl-C during a Ray Data run keeps the partial files already written (with the run's fingerprint);
    the next run leaves those items out of the pipeline and folds old and new partials: the local result."""
    import os
    import signal
    import subprocess
    import sys
    import time

    model, _ = planted
    texts = tmp_path / "big.txt"
    # 200 items = 7 blocks of 16 batches of 2 (ray_engine.RESUME_BATCHES), one partial file each, written ~2 s
    # apart: the Ctrl-C below lands after the first one or two with the rest still to go (it was 400: a slower
    # resume of the same thing)
    n = 200
    texts.write_text("\n".join(corpus_lines(n, seed=9)) + "\n")
    out = tmp_path / "out"
    args = ["corpus", str(model), "--texts", str(texts), "--out", str(out), "--batch-size", "2"]
    args += ["--workers", "1", "--threads", "1", "--provider", "cpu", "--no-progress", "--engine", "ray"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnviz", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    import pyarrow.parquet as pq

    def written() -> bool:  # a whole partial file is there (one still being written has no footer yet)
        for f in partials.glob("*.parquet"):
            try:
                pq.read_metadata(f)
                return True
            except Exception:
                pass
        return False

    partials = out / PARTIALS
    deadline = time.monotonic() + 300
    while not written() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)  # polls for the first complete partial file (the event), not a stand-in delay
    assert written(), proc.communicate()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted" in err, err[-2000:]
    # the real stderr of a CLI run that started Ray itself: attnviz's own line only, no Ray text (ray24)
    assert all(line.startswith("attnviz") for line in err.strip().splitlines()), err[-2000:]
    kept = list(partials.glob("*.parquet"))
    assert kept and (partials / "fingerprint.json").exists() and not (out / "heads.parquet").exists()

    s = run_corpus(_cfg(model, texts, out, engine="ray", threads=1, batch_size=2))
    assert 0 < s.resumed_items < n and s.items == n
    run = json.loads((out / "run.json").read_text())
    assert run["resumed_from_items"] == s.resumed_items and run["items_this_run"] == n - s.resumed_items
    assert not partials.exists()
    run_corpus(_cfg(model, texts, tmp_path / "local", batch_size=2))
    _assert_same(_table(tmp_path / "local"), _table(out), tol=1e-6)


def test_rays_token_notice_is_dropped_and_its_other_warnings_pass():
    """Audit 17: every --engine ray run printed Ray's "Token authentication is enabled for this Ray cluster. Set
    RAY_AUTH_MODE=disabled to opt out ..." beside attnviz's own line.  Ray's own functions log here (to its logger,
    which does not propagate: a handler on it sees what its stderr handler would)."""
    import logging

    from ray._private.authentication import authentication_token_setup as ts

    from attnviz.corpus.ray_engine import quiet_notices

    said: list[str] = []
    seen = logging.Handler(logging.WARNING)
    seen.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    ts.logger.addHandler(seen)
    try:
        quiet_notices()
        ts._warn_token_auth_enabled()
        ts._warn_token_auth_disabled()  # the warning that the cluster is open to anyone stays
    finally:
        ts.logger.removeHandler(seen)
    assert not any("RAY_AUTH_MODE=disabled" in m for m in said), said
    assert any("Token authentication is disabled" in m for m in said), said


def test_the_one_task_sort_gives_ray_datas_blocks(planted, tmp_path):
    """Up to ray_engine.SORT_IN_ONE_TASK items the tokenised blocks are sorted and cut in one plain Ray task instead
    of Ray Data's sort + repartition (seconds of scheduling, session 23): the same rows in the same blocks (each
    block one partial file: what a resumed run skips), with already-reduced items left out as there.  The actors
    then see the same batches: the result bytes equal the local engine's either way (the tests above)."""
    import pickle

    import pyarrow as pa
    import ray

    from attnviz.corpus import ray_engine
    from attnviz.runtime.model import AttentionModel

    model, _ = planted
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(corpus_lines(90, seed=3)) + "\n")
    tok = pickle.dumps(AttentionModel(str(model)).tokenizers[0])
    job = ray_engine.TextJob(str(texts), None, None, 2, False, 4, False, tok)
    ray_engine._context(False)

    def blocks(sorter, done):
        ds = ray_engine._read(job).map_batches(
            ray_engine._keep_texts, batch_format="pyarrow", fn_kwargs={"pair_column": None, "name": texts.name}
        )
        refs, rows = ray_engine._with_index(ds, as_refs=True)
        # in three blocks, as a large corpus's read gives many: behind Ray 2.60's default shuffle (SHUFFLE_V2) Ray
        # Data's sort + strict repartition then cut blocks of 27, 21, 32, 6 rows (one block in: 32, 32, 22)
        whole = pa.concat_tables([ray.get(r) for r in refs])
        refs = [ray.put(whole.slice(a, b - a)) for a, b in ((0, 30), (30, 61), (61, whole.num_rows))]
        ds = sorter(refs, rows, done)
        return [ray.get(r).to_pylist() for r in ds.to_arrow_refs()]

    for done in ([], [0, 5, 17, 40]):
        small = blocks(lambda refs, rows, d: ray_engine._sorted_small(refs, rows - len(d), job, d), done)
        big = blocks(lambda refs, rows, d: ray_engine._sorted_by_ray_data(ray.data.from_arrow_refs(refs), job, d), done)
        assert [len(b) for b in small] == [32, 32, 90 - len(done) - 64]  # 16 batches of 2 a block
        assert small == big
        ids = [r["id"] for b in small for r in b]
        assert sorted(ids) == sorted(set(range(90)) - set(done))
        keys = [(r["length"], r["id"]) for b in small for r in b]
        assert keys == sorted(keys)


def test_the_one_task_image_sort_gives_ray_datas_blocks(tmp_path):
    """--images: up to ray_engine.SORT_IMAGES_IN_ONE_TASK bytes the folder's rows are sorted by path, numbered and
    cut in one plain Ray task instead of Ray Data's sort + repartition (ray24): the same rows in the same blocks
    (each block one partial file), with --max-items and already-reduced items left out as there."""
    import ray

    from attnviz.corpus import ray_engine

    d = tmp_path / "imgs"
    (d / "sub").mkdir(parents=True)
    rng = np.random.default_rng(5)
    names = [f"{i:03d}{'.PNG' if i % 7 == 0 else '.jpg' if i % 5 == 0 else '.png'}" for i in range(75)]
    for i in rng.permutation(75):  # written out of order: the listing's order is not the items' order
        (d / names[i]).write_bytes(f"image {i}".encode() * (1 + i % 3))  # the sort reads no pixels
    (d / "sub" / "000.png").write_bytes(b"below")
    (d / "notes.txt").write_text("not an image")
    ray_engine._context(False)

    def blocks(sorter):
        return [ray.get(r).to_pylist() for r in sorter(ray_engine._read_images(str(d)).to_arrow_refs()).to_arrow_refs()]

    for max_items, done in ((70, [0, 5, 17, 40, 69]),):  # (a fresh run: the image test above, byte for byte)
        job = ray_engine.ImageJob(str(d), max_items, 2)
        n = max_items
        small = blocks(lambda refs: ray_engine._images_sorted_small(refs, n, job, done))
        big = blocks(lambda refs: ray_engine._images_sorted_by_ray_data(ray.data.from_arrow_refs(refs), job, done))
        assert [len(b) for b in small] == [32, 32, n - len(done) - 64]  # 16 batches of 2 a block
        assert small == big
        rows = [r for b in small for r in b]
        assert [r["id"] for r in rows] == sorted(set(range(n)) - set(done))
        assert [Path(r["path"]).name for r in rows] == [names[i] for i in range(n) if i not in done]
        assert all(r["bytes"] == (d / names[r["id"]]).read_bytes() for r in rows)


def test_an_actor_killed_mid_run_ends_it_in_one_line(planted, tmp_path, capfd):
    """A reduce actor that dies mid-run (here SIGKILL, as the OOM killer or a crash in onnxruntime would) ends the
    run: one line naming it, exit 2, the partials folder removed.  Ray Data's default restarted the actor and
    retried its batch without end (ray24: a batch that kills its actor every time ran for ever)."""
    import signal
    import threading
    import time

    import psutil

    model, _ = planted
    texts = tmp_path / "big.txt"
    texts.write_text("\n".join(corpus_lines(200, seed=9)) + "\n")  # 7 partial files at batch 2 (as the Ctrl-C test)
    out = tmp_path / "out"
    args = ["corpus", str(model), "--texts", str(texts), "--out", str(out), "--batch-size", "2", "--engine", "ray"]
    killed: list[int] = []

    def kill_the_actor() -> None:
        deadline = time.monotonic() + 120
        while not killed and time.monotonic() < deadline:
            for p in psutil.Process().children(recursive=True):
                try:  # Ray titles an actor's process by the call it is in: ...(ReduceActor)).submit = a batch
                    title = " ".join(p.cmdline())
                    if "ReduceActor" in title and title.strip().endswith(".submit"):
                        p.send_signal(signal.SIGKILL)
                        killed.append(p.pid)
                except psutil.Error:
                    pass
            time.sleep(0.02)  # polls for the actor's first batch (the event), not a stand-in delay

    watcher = threading.Thread(target=kill_the_actor)
    watcher.start()
    rc = main([*args, "--workers", "1", "--threads", "1", "--provider", "cpu", "--no-progress"])
    watcher.join()
    captured = capfd.readouterr()
    err = captured.err.strip().splitlines()
    assert killed and rc == 2, (killed, rc, captured.err[-2000:])
    assert len(err) == 1 and err[0].startswith("attnviz: error:") and "worker process died" in err[0], err
    assert "--engine local" in err[0] and "big.txt" in err[0]
    assert "(raylet)" not in captured.out and "worker died" not in captured.out, captured.out  # (Ray's own account)
    assert not (out / PARTIALS).exists()


def test_a_cli_run_on_a_running_cluster_via_ray_address_prints_no_ray_text(planted, tmp_path):
    """--ray-address: the command joins a running cluster (this folder's, as `ray start --head` leaves one) instead
    of starting one; its results are the local engine's bytes, and its real stderr holds nothing: no Ray line
    (core_worker's max_restarts warning, Ray Data's deprecations and its advice when --workers 2 exceeds the
    corpus's one block, the token notice; ray24), stdout only attnviz's."""
    import os
    import subprocess
    import sys

    import ray

    model, texts = planted
    address = ray.get_runtime_context().gcs_address  # host:port, as `ray start --head` prints it
    args = ["corpus", str(model), "--texts", str(texts), "--out", str(tmp_path / "ray"), "--engine", "ray"]
    args += ["--ray-address", address, "--workers", "2", "--threads", "1", "--provider", "cpu", "--no-progress"]
    args += ["--batch-size", "6"]  # (_cfg's)
    done = subprocess.run(
        [sys.executable, "-m", "attnviz", *args],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == "", done.stderr[-3000:]
    assert len(done.stdout.splitlines()) == 1 and done.stdout.startswith("wrote "), done.stdout
    run = json.loads((tmp_path / "ray" / "run.json").read_text())
    assert run["engine"] == "ray" and run["items"] == 40
    run_corpus(_cfg(model, texts, tmp_path / "local"))
    for name in ("heads.parquet", "examples.parquet"):
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name
