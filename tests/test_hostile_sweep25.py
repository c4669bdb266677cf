"""Session 25's sweep of the newest surfaces (bench/hostile_sweep25.py): what it found still wrong, each now one line
naming the input and the fix, exit code 2, the folder unchanged.

* A gold word alignment (``align --gold``, ``corpus --gold-column``) with a 5,000-digit word index, or a digit
  ``str.isdigit`` passes and ``int`` refuses (``0-²``), was an internal error (exit 1, ValueError).
* ``kill PID`` (SIGTERM: a scheduler's stop, ``timeout``) of ``attnviz corpus`` ended it on the spot: its
  multiprocessing resource tracker then printed "There appear to be 5 leaked semaphore objects to clean up" on the
  user's terminal.  SIGTERM now stops every command but the window as Ctrl-C does: one line, exit 143, workers
  stopped and joined, nothing published.
* A hand-edited recipe's 1 MB ``view.title`` (or ``--title``) ran about two minutes in matplotlib's layout before
  a figure came out; a title is now at most 1,000 characters.
"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_run import bounded, run_cli_forked

REPO = Path(__file__).resolve().parents[1]
MT = REPO / "models" / "translation.onnx"
TEXT = REPO / "models" / "sequence-classification.onnx"
SRC = "μακάριοι οἱ"  # two words of the bundled translation model's source language


def listing(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): ("dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(folder.rglob("*"))
    }


def align_gold(line: str) -> Callable[[Path], list]:
    def build(tmp: Path) -> list:
        (tmp / "src.txt").write_text(SRC + "\n")
        (tmp / "tgt.txt").write_text("blessed are\n")
        (tmp / "gold.txt").write_text(line + "\n")
        return ["align", MT, "--src", tmp / "src.txt", "--tgt", tmp / "tgt.txt", "--gold", tmp / "gold.txt",
                "--out", tmp / "a.txt"]  # fmt: skip

    return build


def corpus_gold(gold: str) -> Callable[[Path], list]:
    def build(tmp: Path) -> list:
        rec = {"text": SRC, "en": "blessed are", "gold": gold}
        (tmp / "c.jsonl").write_text(json.dumps(rec) + "\n")
        return ["corpus", MT, "--texts", tmp / "c.jsonl", "--text-pair-column", "en", "--gold-column", "gold",
                "--out", tmp / "o", "--no-progress"]  # fmt: skip

    return build


def recipe_title(title: str) -> Callable[[Path], list]:
    """A recipe as 'attnviz figure' writes it (the model beside it), its title edited by hand."""

    def build(tmp: Path) -> list:
        model = tmp / "model.onnx"
        model.write_bytes(TEXT.read_bytes())
        recipe = {
            "attnviz_recipe": 1,
            "source": {"model": {"path": "model.onnx", "sha256": hashlib.sha256(model.read_bytes()).hexdigest()}},
            "inputs": {"text": "7 2 9 5"},
            "output": {"path": "f.png", "format": "png"},
            "view": {"view": "heatmap", "dpi": 40, "title": title},
        }
        (tmp / "f.png.recipe.json").write_text(json.dumps(recipe))
        return ["figure", "--recipe", tmp / "f.png.recipe.json"]

    return build


LONG_INDEX = "9" * 5000  # past int()'s 4,300-digit limit

# (case id) -> (build the inputs in a folder and return argv, words the one line must hold)
CASES: dict[str, tuple[Callable[[Path], list], tuple[str, ...]]] = {
    "align --gold 5,000-digit index": (align_gold("0-" + LONG_INDEX), ("--gold line 1", "over 9 digits")),
    "align --gold superscript digit": (align_gold("0-0 1-\u00b2"), ("--gold line 1", "'1-\u00b2'", "Pharaoh link")),
    "corpus --gold-column 5,000-digit index": (corpus_gold(LONG_INDEX + "-0"), ("--gold-column gold", "9 digits")),
    "corpus --gold-column superscript digit": (corpus_gold("0-0 \u00b2-1"), ("--gold-column gold", "Pharaoh link")),
    "recipe 1 MB title": (recipe_title("x" * 1_000_000), ("title of 1,000,000 characters", "at most 1,000")),
}


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("sweep25")
    built = {}
    for i, (case, (build, _)) in enumerate(CASES.items()):
        folder = root / f"c{i}"
        folder.mkdir()
        built[case] = (folder, build(folder))
    before = {case: listing(folder) for case, (folder, _) in built.items()}
    # 60 s: the 1 MB title took ~120 s to draw before; refused, each case takes about a second
    results = run_cli_forked(*((argv, folder) for folder, argv in built.values()), bound_s=60)
    return {case: (folder, before[case], r) for (case, (folder, _)), r in zip(built.items(), results)}


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_input_is_one_line_and_writes_nothing(ran, case):
    _, words = CASES[case]
    folder, before, result = ran[case]
    rc, err = bounded(result)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith("attnviz: error:") and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert listing(folder) == before


def test_a_gold_line_still_parses_to_its_links():
    """The guard refuses only what int() could not take: plain links parse as before, a 9-digit index included
    (check_gold then says it points past the sentence)."""
    from attnviz.core.align import PharaohError, parse_pharaoh

    assert parse_pharaoh("0-0 1?2 3-1 999999999-0") == ({(0, 0), (3, 1), (999999999, 0)}, {(1, 2)})
    with pytest.raises(PharaohError, match="over 9 digits"):
        parse_pharaoh("1234567890-0")


def test_a_title_at_the_cap_is_drawn(tmp_path):
    """1,000 characters is still a title (drawn, exit 0); one more is refused."""
    from attnviz.cli import main

    args = ["figure", str(TEXT), "--text", "7 2", "--dpi", "40", "--no-recipe", "--title"]
    assert main([*args, "t" * 1000, "--out", str(tmp_path / "a.png")]) == 0
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([*args, "t" * 1001, "--out", str(tmp_path / "b.png")]) == 2
    assert not (tmp_path / "b.png").exists()


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM and process sessions are POSIX")
def test_sigterm_of_corpus_stops_it_as_ctrl_c_does(tmp_path):
    from test_hostile_orphans import GONE_S, _children_until, _env, _left_by

    texts = tmp_path / "digits.txt"
    texts.write_text("".join(" ".join(str((i * 7 + j) % 10) for j in range(12)) + "\n" for i in range(20000)))
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "attnviz.cli", "corpus", str(TEXT), "--texts", str(texts), "--out", str(out)]
    argv += ["--batch-size", "1", "--workers", "2", "--no-progress"]
    parent = subprocess.Popen(argv, env=_env(), start_new_session=True, stderr=subprocess.PIPE, text=True)
    try:
        children = _children_until(
            parent,
            lambda cmds: sum("spawn_main" in c for c in cmds) >= 2 and any("resource_tracker" in c for c in cmds),
        )
        parent.send_signal(signal.SIGTERM)  # the parent alone, as `kill PID` sends it
        _, err = parent.communicate(timeout=60)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
    assert _left_by(children, time.monotonic() + GONE_S) == []
    assert "Traceback" not in err and "leaked" not in err and "Warning" not in err, err
    assert parent.returncode == 128 + signal.SIGTERM and err.strip().splitlines() == [
        "attnviz: terminated (SIGTERM)"
    ], (
        parent.returncode,
        err,
    )
    assert not (out / "heads.parquet").exists()


@pytest.fixture
def default_sigterm():
    """SIGTERM at its default for the test, as a fresh `attnviz` process has it: an earlier test in this process may
    have left a handler of its own (Ray's driver sets one in ray.init), which attnviz leaves alone by design."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_a_sigterm_inside_a_held_block_is_raised_when_the_block_ends(default_sigterm):
    """core.interrupts.held keeps a block whole (a pool recording the worker it spawned, outputs published
    together) against a SIGTERM raised as an interrupt too, as it does against Ctrl-C."""
    import os

    from attnviz.core.interrupts import Terminated, held, terminate_as_interrupt

    previous = terminate_as_interrupt()
    assert previous is not None  # SIGTERM was at its default (the fixture)
    done = []
    try:
        with pytest.raises(Terminated):
            with held():
                os.kill(os.getpid(), signal.SIGTERM)
                done.append("the rest of the block")
        assert done == ["the rest of the block"]
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM is POSIX")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_inside_an_extensions_import_is_told_as_the_stop(monkeypatch, capsys, signum, default_sigterm):
    """A SIGTERM (or Ctrl-C) that lands while a C extension initialises comes out as that import's ImportError
    (numpy's "IMPORTANT: PLEASE READ THIS ..."): the command says it was stopped, not that attnviz has a bug.  The
    stand-in run raises the signal and turns what it raises into an ImportError, as numpy's import did (seen once in
    test_sigterm_of_corpus_stops_it_as_ctrl_c_does, the signal sent while the parent imported)."""
    import attnviz.runtime.commands.inspect as inspect_command
    from attnviz.cli import main

    def importing(args):
        try:
            signal.raise_signal(signum)
            for _ in range(1000):  # the handler runs at the next bytecode boundary
                pass
        except KeyboardInterrupt as e:
            raise ImportError("IMPORTANT: PLEASE READ THIS FOR ADVICE ON HOW TO SOLVE THIS ISSUE!") from e
        raise AssertionError("the signal's handler did not run")

    monkeypatch.setattr(inspect_command, "run", importing)
    code = main(["inspect", str(TEXT)])
    err = capsys.readouterr().err.strip().splitlines()
    assert (code, err) == (
        (128 + signal.SIGTERM, ["attnviz: terminated (SIGTERM)"])
        if signum == signal.SIGTERM
        else (130, ["attnviz: interrupted"])
    )


def test_a_ray_start_does_not_take_sigterm_from_the_command(default_sigterm, monkeypatch):
    """``ray.init`` sets its driver's SIGTERM handler (it exits with code 15 and no word: a `kill PID` of
    `corpus --engine ray` gave rc 15 and an empty stderr); attnviz's handler is put back after Ray starts.  The
    stand-in start sets a foreign handler as Ray's does, so the test needs no cluster."""
    import types

    from attnviz.core.interrupts import raise_terminated, terminate_as_interrupt
    from attnviz.corpus import ray_engine

    def foreign(signum, frame):
        raise SystemExit(15)

    fake_ray = types.SimpleNamespace(is_initialized=lambda: False)
    monkeypatch.setattr(ray_engine, "_ray", lambda: fake_ray)
    monkeypatch.setattr(ray_engine, "_start", lambda *a: signal.signal(signal.SIGTERM, foreign))
    terminate_as_interrupt()
    assert ray_engine._init(types.SimpleNamespace(ray_address=None)) is fake_ray
    assert signal.getsignal(signal.SIGTERM) is raise_terminated
    # where the command does not raise SIGTERM as a stop (the window, a caller's own handler), Ray's stays
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    ray_engine._init(types.SimpleNamespace(ray_address=None))
    assert signal.getsignal(signal.SIGTERM) is foreign
