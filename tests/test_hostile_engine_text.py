"""Issue 24, item 9: inputs past a model's positions, and a Ray cluster that cannot be reached, are one line in
attnviz's words (exit 2) — never onnxruntime's C++ file and line, never "internal error".

The position limit is one check (``attnviz.runtime.limits.check_positions``) at every entry that feeds tokens:
``extract --text`` had it; corpus items and targets, ``align`` sentences and ``extract --text-pair`` did not.
The demo models declare their limits in their training config (``max_len``: 16 and 128).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnviz.cli import main

REPO = Path(__file__).resolve().parents[1]
CLASSIFIER = REPO / "models" / "sequence-classification.onnx"  # max_len 16
TRANSLATION = REPO / "models" / "translation.onnx"  # max_len 128


def refused(capsys, argv, *words: str) -> str:
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert err.startswith("attnviz: error:") and "\n" not in err and "Traceback" not in err, err
    assert "onnxruntime" not in err and ".h:" not in err and ".cc:" not in err, err  # no engine source text
    for w in words:
        assert w.lower() in err.lower(), (w, err)
    return err


def test_a_corpus_item_past_the_positions_is_named(tmp_path, capsys):
    texts = tmp_path / "t.txt"
    texts.write_text("1 2 3\n" + " ".join(["3"] * 40) + "\n")
    out = tmp_path / "out"
    argv = ["corpus", CLASSIFIER, "--texts", texts, "--out", out, "--no-progress", "--workers", "1"]
    refused(capsys, argv, "corpus item 1", "positions stop at 16")
    assert not out.exists()  # refused while planning: no results folder


@pytest.mark.parametrize("side", ["src", "tgt"])
def test_align_sentences_past_the_positions(tmp_path, capsys, side):
    files = {"src": tmp_path / "a.src", "tgt": tmp_path / "a.tgt"}
    for name, f in files.items():
        f.write_text("the cat\n" + (" ".join(["the"] * 300) if name == side else "the dog") + "\n")
    what = {"src": "source", "tgt": "target"}[side]
    argv = ["align", TRANSLATION, "--src", files["src"], "--tgt", files["tgt"], "--out", tmp_path / "a.out"]
    refused(capsys, argv, "line 2", f"the {what} sentence", "positions stop at 128")
    assert not (tmp_path / "a.out").exists()


def test_corpus_targets_past_the_positions(tmp_path, capsys):
    texts = tmp_path / "p.jsonl"
    long = " ".join(["the"] * 300)
    rows = [{"text": "the cat", "en": "the cat"}, {"text": "the dog", "en": long}]
    texts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["corpus", TRANSLATION, "--texts", texts, "--text-pair-column", "en", "--out", tmp_path / "o"]
    refused(capsys, [*argv, "--no-progress", "--workers", "1"], "corpus item 1", "positions stop at 128")


def test_extract_text_pair_past_the_positions(tmp_path, capsys):
    argv = ["extract", TRANSLATION, "--text", "the cat", "--text-pair", " ".join(["the"] * 300)]
    refused(capsys, [*argv, "--out", tmp_path / "m.npz"], "text pair", "positions stop at 128")


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed")
def test_an_unreachable_ray_address_is_one_line_in_seconds(tmp_path):
    texts = tmp_path / "t.txt"
    texts.write_text("1 2 3\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    argv = [sys.executable, "-m", "attnviz.cli", "corpus", str(CLASSIFIER), "--texts", str(texts), "--out"]
    argv += [str(tmp_path / "o"), "--engine", "ray", "--ray-address", "127.0.0.1:1", "--no-progress"]
    # bounded: Ray itself retries an unreachable address for minutes
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    err = done.stderr.strip()
    assert done.returncode == 2, err
    assert err.startswith("attnviz: error:") and "\n" not in err and "internal error" not in err, err
    assert "Ray" in err and "127.0.0.1:1" in err and "--ray-address" in err
    assert not (tmp_path / "o").exists()
