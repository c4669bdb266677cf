"""``open MAPS.npz --text-file F`` (or --text, --image, --generate...): no model runs on a maps file or a corpus
run's results, and the window dropped the inputs without a word.  Refused in one line naming the flags as typed,
exit 2, as ``figure --maps M --text T`` refuses them."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from cli_run import run_cli_each

from attnviz import AttnvizError
from attnviz.gui.command import _inputs_read

TEXT = Path(__file__).resolve().parents[2] / "models" / "sequence-classification.onnx"


def _args(**given) -> argparse.Namespace:
    keys = ("text", "text_pair", "image", "audio", "generate", "beams", "tokenizer", "max_tokens", "max_seconds",
            "variant", "text_file")  # fmt: skip
    return argparse.Namespace(**{k: given.get(k) for k in keys})


def test_corpus_results_and_no_demo(tmp_path):
    (tmp_path / "run.json").write_text("{}")  # what is left of a corpus run: opened as one, no model
    with pytest.raises(AttnvizError, match=r"is a corpus run's results, already computed; no model runs; drop --text"):
        _inputs_read(_args(text="a"), tmp_path)
    with pytest.raises(AttnvizError, match=r"no model to run --image, --generate on"):
        _inputs_read(_args(image="x.png", generate=3), None)
    _inputs_read(_args(), tmp_path)  # nothing given: nothing to say
    _inputs_read(_args(text="a"), TEXT)  # a model runs on it


def test_open_maps_with_inputs(tmp_path):
    maps, doc = tmp_path / "m.npz", tmp_path / "doc.txt"
    doc.write_text("7 2 9 5\n")
    shot = tmp_path / "s.png"
    got = run_cli_each(
        ["extract", TEXT, "--text", "7 2 9 5", "--out", maps],
        ["open", maps, "--text-file", doc, "--screenshot", shot],
        ["open", maps, "--text", "7 2", "--generate", "2", "--screenshot", shot],
        ["open", maps, "--size", "600x400", "--screenshot", shot],
        env={"QT_QPA_PLATFORM": "offscreen"},
    )
    assert [rc for rc, _ in got] == [0, 2, 2, 0], got
    for (_, err), flags in zip(got[1:3], ("--text-file", "--text, --generate")):
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert lines == [
            f"attnviz: error: m.npz holds attention maps already computed (by 'attnviz extract'); no model runs; "
            f"drop {flags}"
        ], err
    assert shot.is_file()  # the maps alone open, as before
