"""Audit 17: ``--max-tokens N`` on a text past the tokens cap (ATTNVIZ_MAX_TOKENS, 16,384: it bounds the maps).
The cap counted the text's tokens before the cut, so a 20,000-word line with --max-tokens 5 was refused with "raise
the limit with ATTNVIZ_MAX_TOKENS=20002": the flag given was the fix.  The cap now counts the tokens kept; without
the flag the line is refused as before."""

from __future__ import annotations

import numpy as np
from test_engines import _assert_same, _cfg, _table

from attnviz.cli import main
from attnviz.core.io import load_npz
from attnviz.corpus import run_corpus

N = 20_000  # words: past the cap of 16,384 tokens


def test_corpus_cuts_a_line_past_the_cap_as_it_cuts_a_short_one(planted, tmp_path, capsys):
    model, texts = planted
    lines = texts.read_text().splitlines()
    words = lines[0].split()
    long_line = " ".join((words * (N // len(words) + 1))[:N])
    huge, short = tmp_path / "huge.txt", tmp_path / "short.txt"
    huge.write_text("\n".join([long_line, *lines[1:]]) + "\n")
    kept = (words * 3)[:3]  # --max-tokens 5: [CLS] and the first three words, [SEP] kept last
    short.write_text("\n".join([" ".join(kept), *lines[1:]]) + "\n")
    run_corpus(_cfg(model, huge, tmp_path / "huge", max_tokens=5))
    run_corpus(_cfg(model, short, tmp_path / "short", max_tokens=5))
    a, b = _table(tmp_path / "huge"), _table(tmp_path / "short")
    _assert_same(a, b)
    rc = main(["corpus", str(model), "--texts", str(huge), "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "ATTNVIZ_MAX_TOKENS" in err and "line 1" in err  # without the flag: refused, as before


def test_extract_cuts_a_text_past_the_cap(planted, tmp_path, capsys):
    model, texts = planted
    words = texts.read_text().split()
    long_text = " ".join((words * (N // len(words) + 1))[:N])
    assert (
        main(["extract", str(model), "--text", long_text, "--max-tokens", "5", "--out", str(tmp_path / "a.npz")]) == 0
    )
    assert main(["extract", str(model), "--text", " ".join(words[:3]), "--out", str(tmp_path / "b.npz")]) == 0
    a, b = load_npz(tmp_path / "a.npz"), load_npz(tmp_path / "b.npz")
    assert len(a.maps) == len(b.maps)
    for x, y in zip(a.maps, b.maps):
        np.testing.assert_allclose(x.array(), y.array(), atol=1e-6)
    capsys.readouterr()
    assert (
        main(["extract", str(model), "--text", long_text, "--max-tokens", "17000", "--out", str(tmp_path / "c.npz")])
        == 2
    )
    assert "17,000 tokens is over the limit" in capsys.readouterr().err  # what is kept still meets the cap


def test_ray_cuts_a_line_past_the_cap_as_the_local_engine(planted, tmp_path, capsys, ray_local):
    """--engine ray tokenises in its own tasks: the same cap on what is kept, and without --max-tokens the same
    refusal, naming the item (it said only "the text: 20,000 tokens ...")."""
    model, texts = planted
    lines = texts.read_text().splitlines()
    words = lines[0].split()
    huge = tmp_path / "huge.txt"
    huge.write_text("\n".join([" ".join((words * (N // len(words) + 1))[:N]), *lines[1:]]) + "\n")
    run_corpus(_cfg(model, huge, tmp_path / "local", max_tokens=5))
    run_corpus(_cfg(model, huge, tmp_path / "ray", max_tokens=5, engine="ray", threads=1))
    _assert_same(_table(tmp_path / "local"), _table(tmp_path / "ray"), tol=1e-6)
    argv = ["corpus", str(model), "--texts", str(huge), "--out", str(tmp_path / "o"), "--no-progress"]
    capsys.readouterr()  # (what the fixture's own ray.init printed)
    assert main([*argv, "--engine", "ray", "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "corpus item 0" in err[0] and "ATTNVIZ_MAX_TOKENS" in err[0], err
