"""ux29: ``figure --view heatmap --head 1,2`` drew head 1 alone without a word (only links overlays several heads
and the image view sets them side by side), so the second head looked drawn too.  One note says which head the
view drew; the figure is the one ``--head 1`` draws."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from attnviz.cli import main

TRANSLATION = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"


@pytest.fixture(scope="module")
def maps(tmp_path_factory):
    out = tmp_path_factory.mktemp("maps") / "m.npz"
    assert (
        main(["extract", str(TRANSLATION), "--text", "ἐν ἀρχῇ ἦν ὁ λόγος", "--generate", "6", "--out", str(out)]) == 0
    )
    return out


@pytest.mark.parametrize("view", ["heatmap", "alignment", "strip"])
def test_several_heads_on_a_one_head_view_say_which_was_drawn(maps, tmp_path, capsys, view):
    both, one = tmp_path / "both.png", tmp_path / "one.png"
    common = ["figure", str(maps), "--view", view, "--layer", "1", "--dpi", "40", "--no-recipe"]
    capsys.readouterr()
    assert main([*common, "--head", "1,2", "--out", str(both)]) == 0
    notes = [x for x in capsys.readouterr().err.splitlines() if "--head 1,2" in x]
    assert notes == [
        f"attnviz: note: --head 1,2: the {view} view draws one head, head 1 (several heads are overlaid in the "
        "links view, side by side in the image view)"
    ]
    assert main([*common, "--head", "1", "--out", str(one)]) == 0
    assert both.read_bytes() == one.read_bytes()  # what it says: head 1's figure


def test_links_overlays_them_without_a_note(maps, tmp_path, capsys):
    out = tmp_path / "links.png"
    capsys.readouterr()
    argv = ["figure", str(maps), "--view", "links", "--layer", "1", "--head", "1,2", "--dpi", "40", "--out", str(out)]
    assert main(argv) == 0
    assert "--head 1,2" not in capsys.readouterr().err


def test_all_heads_out_names_the_files_the_help_says(maps, tmp_path, capsys):
    """ux29: --out's help said "(with --all-heads: a folder, or a name pattern)", and a pattern guessed from it
    ("h_{layer}_{head}.pdf") wrote files named h_{layer}_{head}_L00_H00.pdf.  The help shows what a name does."""
    with pytest.raises(SystemExit):
        main(["figure", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert (
        "a file name that each figure's layer and head extend: figs/attn.pdf writes figs/attn_L00_H00.pdf, ...)" in said
    )
    (tmp_path / "figs").mkdir()
    argv = ["figure", str(maps), "--all-heads", "--layer", "0", "--dpi", "30", "--no-recipe"]
    assert main([*argv, "--out", str(tmp_path / "figs" / "attn.pdf")]) == 0
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == [f"attn_L00_H0{h}.pdf" for h in range(4)]
