"""A recipe's ``inputs`` and ``options`` keys that nothing reads are named in one note (a hand edit's typo, such as
``"max_token"``, or a view key put among the options, drew a figure other than the one meant without a word); every
key ``figure`` or the window's export writes is read, so their recipes stay silent."""

from __future__ import annotations

import json
from pathlib import Path

from cli_run import run_cli_each

from attnviz.figures import command
from attnviz.figures.recipe import READ_KEYS, unread_keys_note

TEXT = Path(__file__).resolve().parents[2] / "models" / "sequence-classification.onnx"


def test_figure_writes_only_keys_it_reads():
    """The options `figure` records (with defaults, or when given) are exactly those a recipe is read for."""
    written = set(command._OPTION_DEFAULTS) | set(command._RECORDED_WHEN_GIVEN)
    assert written == set(READ_KEYS["options"])


def test_note_names_each_unread_key_and_its_nearest():
    r = {"inputs": {"text": "a", "txt": "b"}, "options": {"provider": "auto", "vmx": 1, "max_token": 3, "a b": 1}}
    note = unread_keys_note(r, "r.json")
    assert note == (
        "r.json: inputs.txt (did you mean inputs.text?), options.vmx (did you mean view.vmax?), options.max_token "
        "(did you mean options.max_tokens?), options.'a b' not read (no such recipe keys); the figure is drawn "
        "without them: correct the key or drop it"
    )
    assert unread_keys_note({"inputs": {"text": "a"}, "options": dict.fromkeys(READ_KEYS["options"])}, "r") is None
    assert unread_keys_note({"inputs": None, "options": None}, "r") is None


def test_figure_says_it_and_draws_as_without(tmp_path):
    """As a user runs it: a recipe with unknown keys draws the bytes of the recipe without them, with one note."""
    first = run_cli_each(
        ["figure", TEXT, "--text", "7 2 9 5", "--dpi", "40", "--max-tokens", "3", "--out", tmp_path / "f.png"]
    )
    assert first[0][0] == 0, first
    recipe = json.loads((tmp_path / "f.png.recipe.json").read_text())
    assert recipe["options"]["max_tokens"] == 3
    recipe["options"]["max_token"] = 2  # a typo: max_tokens stays 3, and the figure with it
    recipe["inputs"]["text_pairs"] = "x"
    (tmp_path / "e.recipe.json").write_text(json.dumps(recipe))
    got = run_cli_each(
        ["figure", "--recipe", tmp_path / "f.png.recipe.json", "--out", tmp_path / "g.png"],
        ["figure", "--recipe", tmp_path / "e.recipe.json", "--out", tmp_path / "h.png"],
    )
    assert [rc for rc, _ in got] == [0, 0], got
    assert "not read" not in got[0][1]
    notes = [ln for ln in got[1][1].splitlines() if "not read" in ln]
    assert notes == [
        "attnviz: note: e.recipe.json: inputs.text_pairs (did you mean inputs.text_pair?), options.max_token (did "
        "you mean options.max_tokens?) not read (no such recipe keys); the figure is drawn without them: correct the "
        "key or drop it"
    ]
    assert (tmp_path / "h.png").read_bytes() == (tmp_path / "g.png").read_bytes() == (tmp_path / "f.png").read_bytes()
