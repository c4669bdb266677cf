"""Engines and workers agree; an interrupted run resumes to the same result; bad input gets one clear line."""

import json

import numpy as np
import pytest
from reference import STATS

from attnviz.cli import main
from attnviz.corpus import CorpusConfig, run_corpus
from attnviz.corpus.output import read
from attnviz.corpus.run import CHECKPOINT


def _cfg(model, texts, out, **kw):
    kw.setdefault("workers", 1)
    kw.setdefault("batch_size", 6)
    return CorpusConfig(model=str(model), texts=str(texts), out=str(out), progress=False, provider="cpu", **kw)


def _table(folder):
    res = read(folder)
    heads = [{k: v for k, v in r.items()} for r in res.heads]
    ex = [
        (e["layer"], e["head"], e["score"], e["rank"], e["item"], e["value"], e["row"], e["col"]) for e in res.examples
    ]
    return heads, ex


def _assert_same(a, b, tol=0.0):
    (ha, ea), (hb, eb) = a, b
    assert len(ha) == len(hb) and len(ea) == len(eb)
    for x, y in zip(ha, hb):
        assert x["role"] == y["role"] and x["items"] == y["items"] and x["tokens"] == y["tokens"]
        for s in (*STATS, "role_score"):
            assert (np.isnan(x[s]) and np.isnan(y[s])) or abs(x[s] - y[s]) <= tol, (s, x[s], y[s])
    values = {}
    for x in ea:
        values.setdefault(x[:3], []).append(x[5])
    for x, y in zip(ea, eb):
        assert x[:4] == y[:4] and abs(x[5] - y[5]) <= tol, (x, y)
        if x[4] != y[4] or x[6:] != y[6:]:  # another item: only where float noise reorders a tie within tol
            assert tol > 0 and sum(abs(v - x[5]) <= tol for v in values[x[:3]]) > 1, (x, y)


def test_two_local_workers_equal_one(planted, tmp_path):
    model, texts = planted
    run_corpus(_cfg(model, texts, tmp_path / "one"))
    run_corpus(_cfg(model, texts, tmp_path / "two", workers=2, threads=1))
    assert json.loads((tmp_path / "two" / "run.json").read_text())["workers"] == 2
    _assert_same(_table(tmp_path / "one"), _table(tmp_path / "two"))  # batch-ordered folding: bit-identical


def test_interrupt_then_resume_gives_the_same_result(planted, tmp_path):
    model, texts = planted
    run_corpus(_cfg(model, texts, tmp_path / "full"))

    def stop(done):
        if done >= 18:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_corpus(_cfg(model, texts, tmp_path / "cut"), on_batch=stop)
    assert (tmp_path / "cut" / CHECKPOINT).exists() and not (tmp_path / "cut" / "heads.parquet").exists()
    s = run_corpus(_cfg(model, texts, tmp_path / "cut"))
    assert s.resumed_items == 18 and s.items == 40
    assert not (tmp_path / "cut" / CHECKPOINT).exists()
    run = json.loads((tmp_path / "cut" / "run.json").read_text())
    assert run["resumed_from_items"] == 18 and run["items_this_run"] == 22
    _assert_same(_table(tmp_path / "full"), _table(tmp_path / "cut"))


def test_cli_sigint_checkpoints_and_resumes(planted, tmp_path):
    """A real Ctrl-C: the CLI exits 130 with the progress kept; the next run finishes from there."""
    import os
    import signal
    import subprocess
    import sys

    model, _ = planted
    from planted import corpus_lines

    texts = tmp_path / "big.txt"
    texts.write_text("\n".join(corpus_lines(2000, seed=9)) + "\n")
    out = tmp_path / "out"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "attnviz",
            "corpus",
            str(model),
            "--texts",
            str(texts),
            "--out",
            str(out),
            "--batch-size",
            "2",
            "--workers",
            "1",
            "--provider",
            "cpu",
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    ckpt = out / CHECKPOINT
    import time

    deadline = time.monotonic() + 60
    while not ckpt.exists() and proc.poll() is None and time.monotonic() < deadline:  # wait for the first checkpoint
        time.sleep(0.05)
    assert ckpt.exists(), proc.communicate()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err
    assert ckpt.exists() and not (out / "heads.parquet").exists()
    assert (
        main(
            [
                "corpus",
                str(model),
                "--texts",
                str(texts),
                "--out",
                str(out),
                "--batch-size",
                "2",
                "--workers",
                "1",
                "--provider",
                "cpu",
                "--no-progress",
            ]
        )
        == 0
    )
    run = json.loads((out / "run.json").read_text())
    assert run["items"] == 2000 and 0 < run["resumed_from_items"] < 2000


def test_text_formats_read_the_same_items(planted, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    model, texts = planted
    lines = texts.read_text().splitlines()
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(lines)))
    pq.write_table(pa.table({"text": lines}), tmp_path / "c.parquet")
    run_corpus(_cfg(model, texts, tmp_path / "txt"))
    for f in ("c.jsonl", "c.parquet"):
        run_corpus(_cfg(model, tmp_path / f, tmp_path / f.replace(".", "_")))
        _assert_same(_table(tmp_path / "txt"), _table(tmp_path / f.replace(".", "_")))


def test_text_pair_column_feeds_sentence_b(planted, tmp_path):
    model, _ = planted
    f = tmp_path / "pairs.jsonl"
    f.write_text("".join(json.dumps({"text": "the cat", "b": "a dog ran"}) + "\n" for _ in range(3)))
    run_corpus(_cfg(model, f, tmp_path / "out", pair_column="b"))
    r = json.loads((tmp_path / "out" / "run.json").read_text())
    assert r["tokens"] == 3 * (2 + 3 + 2)  # [CLS] the cat a dog ran [SEP] (the vocabulary tokenizer's pair form)


def test_run_json_hashes_and_max_items(planted, tmp_path):
    import hashlib

    model, texts = planted
    run_corpus(_cfg(model, texts, tmp_path / "out", max_items=10))
    r = json.loads((tmp_path / "out" / "run.json").read_text())
    assert r["model_sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
    assert r["items"] == 10 and r["items_per_s"] > 0 and r["wall_s"] > 0 and r["versions"]["onnxruntime"]
    assert len(r["data_sha256"]) == 64


@pytest.mark.parametrize(
    "case,expect",
    [
        ("missing_texts", "no such file"),
        ("bad_suffix", "unknown format"),
        ("jsonl_no_text", 'no "text" string'),
        ("out_is_file", "is a file"),
        ("both_inputs", "exactly one of"),
        ("pair_in_txt", "no columns"),
        ("enc_dec", "--generate must be 1 or more"),  # an encoder-decoder generating nothing
        ("other_checkpoint", "belongs to another run"),
        ("no_ray_engine", "needs --engine ray"),
        ("broken_checkpoint", "unreadable checkpoint"),
    ],
)
def test_bad_input_one_line(planted, tmp_path, capsys, case, expect):
    model, texts = planted
    out = tmp_path / "out"
    args = ["corpus", str(model), "--texts", str(texts), "--out", str(out), "--no-progress", "--workers", "1"]
    if case == "missing_texts":
        args[3] = str(tmp_path / "nope.txt")
    elif case == "bad_suffix":
        (tmp_path / "c.xlsx").write_bytes(b"PK\x03\x04")  # (.csv is read now: tests/corpus/test_delimited.py)
        args[3] = str(tmp_path / "c.xlsx")
    elif case == "jsonl_no_text":
        (tmp_path / "c.jsonl").write_text('{"sentence": "x"}\n')
        args[3] = str(tmp_path / "c.jsonl")
    elif case == "out_is_file":
        out.write_text("x")
    elif case == "both_inputs":
        args += ["--images", str(tmp_path)]
    elif case == "pair_in_txt":
        args += ["--text-pair-column", "b"]
    elif case == "enc_dec":
        from pathlib import Path

        mt = Path(__file__).parents[2] / "models" / "translation.onnx"
        if not mt.exists():
            pytest.skip("models/translation.onnx not present")
        args[1] = str(mt)
        args += ["--generate", "0"]
    elif case == "other_checkpoint":
        out.mkdir()
        np.savez(out / CHECKPOINT, fingerprint=np.array("another"))
    elif case == "broken_checkpoint":
        out.mkdir()
        (out / CHECKPOINT).write_bytes(b"PK\x03\x04 truncated")
    elif case == "no_ray_engine":
        args += ["--ray-address", "auto"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("attnviz: error:") and expect in err[0], err


def test_a_worker_killed_mid_run_is_one_crash_line_and_keeps_the_checkpoint(planted, tmp_path):
    """The local engine's workers run onnxruntime in-process: the worker is the crash boundary.  A worker killed by
    a signal (as a native fault would) breaks the pool; the driver reports it and keeps the folded batches."""
    import signal

    import psutil

    from attnviz import AttnvizError
    from attnviz.runtime import host

    model, texts = planted
    killed: list[int] = []

    def kill(done):
        if killed:
            return
        isolation = host._host.proc.pid if host._host is not None else None  # the driver's own probe child
        for c in psutil.Process().children():
            try:
                line = " ".join(c.cmdline())
            except psutil.Error:  # a child that ended meanwhile (a zombie until reaped): not a pool worker
                continue
            if c.pid != isolation and "spawn_main" in line:
                c.send_signal(signal.SIGKILL)
                killed.append(c.pid)

    with pytest.raises(AttnvizError, match="crashed onnxruntime"):
        run_corpus(_cfg(model, texts, tmp_path / "out", batch_size=2), on_batch=kill)
    assert killed and (tmp_path / "out" / CHECKPOINT).exists()
    s = run_corpus(_cfg(model, texts, tmp_path / "out", batch_size=2))  # the next run resumes from there
    assert s.resumed_items >= 2 and s.items == 40
