"""core/comma_list.py: a comma list flag refuses an empty item (``--head 0,,1`` drew heads 0 and 1, ``--head 1,``
head 1, without a word), in every command that takes one: figure's --head, ablate's and align-audio's --heads
(runtime.ablation.parse_heads)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run_cli_each

from attnviz import AttnvizError
from attnviz.core.attention import SiteInfo
from attnviz.core.comma_list import EmptyItem, comma_items
from attnviz.runtime.ablation import parse_heads

REPO = Path(__file__).resolve().parents[2]
SEQ = REPO / "models" / "sequence-classification.onnx"


def test_items_are_split_and_stripped():
    assert comma_items("0,3,5") == ["0", "3", "5"]
    assert comma_items(" 1 , 2 ") == ["1", "2"]
    assert comma_items("encoder self 2:5") == ["encoder self 2:5"]


@pytest.mark.parametrize(
    "text, where",
    [("0,,1", "an empty item between two commas"), ("1,", "ends in a comma"), (",1", "starts with a comma"),
     ("0, ,1", "an empty item between two commas"), (",", "the list is empty"), ("", "the list is empty"),
     ("  ", "the list is empty")],
)  # fmt: skip
def test_an_empty_item_is_refused(text, where):
    with pytest.raises(EmptyItem, match=where):
        comma_items(text)


SITES = [SiteInfo("encoder", "self", layer, 4, f"n{layer}", "softmax") for layer in (0, 1)]


def test_parse_heads_refuses_an_empty_item():
    assert parse_heads("encoder self 0:1, encoder self 1:2", SITES) == {0: [1], 1: [2]}
    for spec in ("encoder self 0:1,", "encoder self 0:1,,encoder self 1:2", ",encoder self 0:1", ","):
        with pytest.raises(AttnvizError, match=r"^--heads '.*': (it|the list)"):
            parse_heads(spec, SITES)


def test_the_commands_refuse_it(tmp_path):
    """As a user types them: one line naming the list and the slip, exit 2, nothing written; the same list without
    the slip is drawn (the refusal is the empty item's, not the heads')."""
    out = tmp_path / "f.png"
    fig = ["figure", SEQ, "--text", "1 2 3", "--dpi", "30", "--out", out]
    abl = ["ablate", SEQ, "--text", "1 2 3", "--out", tmp_path / "abl", "--heads"]
    got = run_cli_each(
        [*fig, "--head", "0,,1"],
        [*fig, "--head", "1,"],
        [*abl, "encoder self 0:1,"],
        [*abl, "encoder self 0:1,,encoder self 1:0"],
    )
    lines = [err.strip().splitlines() for _, err in got]
    assert [rc for rc, _ in got] == [2] * 4, got
    assert lines[0] == [
        "attnviz figure: error: argument --head: '0,,1': it has an empty item between two commas; give a head or a "
        "comma list like 0,3,5; see 'attnviz figure --help'"
    ]
    assert lines[1][-1].startswith("attnviz figure: error: argument --head: '1,': it ends in a comma;")
    assert lines[2] == [
        "attnviz: error: --heads 'encoder self 0:1,': it ends in a comma; give e.g. 'encoder self 2:5,decoder cross "
        "0:1', or use --all-heads"
    ]
    assert lines[3][-1].startswith("attnviz: error: --heads 'encoder self 0:1,,encoder self 1:0': it has an empty")
    assert not out.exists() and not (tmp_path / "abl").exists()
    assert run_cli_each([*fig, "--head", "0,1"])[0][0] == 0 and out.is_file()
