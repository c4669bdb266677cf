"""Outputs that belong together are published together (core/writes.py's atomic_paths): align's links and
translations, a figure and its recipe.  Written one after the other, a Ctrl-C between the two renames left the new
translations beside the old links (and a new figure beside the recipe of the old one).  Here the Ctrl-C is sent
by the process to itself right after the first rename, as a user's would land: both files are the new ones (the
interrupt is raised once they are), never one of each."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from attnviz.cli import main
from attnviz.core import writes

MODELS = Path(__file__).resolve().parents[2] / "models"


@pytest.fixture
def ctrl_c_after_first_rename(monkeypatch, tmp_path):
    """os.replace as it is, but the first rename onto a file in tmp_path is followed by a SIGINT to this process."""
    real, sent = os.replace, []

    def replace(src, dst, *a, **k):
        real(src, dst, *a, **k)
        if not sent and Path(dst).parent == tmp_path:
            sent.append(dst)
            os.kill(os.getpid(), signal.SIGINT)  # delivered to the main thread's handler at once

    monkeypatch.setattr(os, "replace", replace)
    return sent


def test_atomic_paths_publish_all_or_none(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("old a")
    b.write_text("old b")
    with pytest.raises(RuntimeError), writes.atomic_paths([(a, "--out"), (b, "--out")]) as (ta, tb):
        ta.write_text("new a")
        raise RuntimeError("the second file's write failed")
    assert (a.read_text(), b.read_text()) == ("old a", "old b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]  # no temp file left
    writes.atomic_write_files([(a, b"new a", "--out"), (b, b"new b", "--out")])
    assert (a.read_text(), b.read_text()) == ("new a", "new b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]


def test_ctrl_c_between_the_renames_is_held_until_both_are_done(tmp_path, ctrl_c_after_first_rename):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("old a")
    b.write_text("old b")
    with pytest.raises(KeyboardInterrupt):
        writes.atomic_write_files([(a, b"new a", "--out"), (b, b"new b", "--out")])
    assert ctrl_c_after_first_rename == [a]
    assert (a.read_text(), b.read_text()) == ("new a", "new b")


def test_align_translations_and_links_are_both_new_after_a_ctrl_c(tmp_path, capsys, ctrl_c_after_first_rename):
    src, out, trans = tmp_path / "a.src", tmp_path / "a.txt", tmp_path / "a.translations.txt"
    src.write_text("Μὴ κρίνετε ἵνα μὴ κριθῆτε\n", encoding="utf-8")
    out.write_text("old links\n")
    trans.write_text("old translations\n")
    rc = main(["align", str(MODELS / "translation.onnx"), "--src", str(src), "--out", str(out), "--no-progress"])
    assert rc == 130 and "interrupted" in capsys.readouterr().err
    assert ctrl_c_after_first_rename  # the interrupt came between the two renames
    assert out.read_text() != "old links\n" and trans.read_text() != "old translations\n"
    assert len(out.read_text().split("-")) > 1 and trans.read_text().strip()  # the new links and words


def test_a_figure_and_its_recipe_are_both_new_after_a_ctrl_c(tmp_path, capsys, ctrl_c_after_first_rename):
    fig = tmp_path / "f.svg"
    recipe = tmp_path / "f.svg.recipe.json"
    fig.write_text("old figure")
    recipe.write_text("old recipe")
    model = MODELS / "sequence-classification.onnx"
    rc = main(["figure", str(model), "--text", "1 2 3", "--view", "heatmap", "--out", str(fig)])
    assert rc == 130
    assert ctrl_c_after_first_rename  # the interrupt came between the two renames
    assert fig.read_text().startswith("<?xml") and '"view": "heatmap"' in recipe.read_text()
