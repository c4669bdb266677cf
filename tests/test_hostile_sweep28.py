"""Session 28's sweep of its own surfaces (bench/hostile_sweep28.py, 819 cases): number flags fed values int() and
float() read, view flags on views that do not read them, recipes with keys nothing reads, ``open MAPS.npz`` with
inputs.  What it found, and the hostile forms of the new notes, in one interpreter:

* ``figure --vmax inf`` (or ``1e400``, a number float() reads as inf) drew every weight in the lowest colour, exit 0:
  now one line, exit 2, as ``--vmax 0`` and ``nan`` are.
* The note on a recipe's unknown keys stays one line whatever the recipe holds: 10,000 keys, a 1 MB key, a key of
  terminal escape codes and a newline.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run_cli_each

REPO = Path(__file__).resolve().parents[1]
TEXT = REPO / "models" / "sequence-classification.onnx"
S = "7 2 9 5"


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("sweep28")
    first = run_cli_each(["figure", TEXT, "--text", S, "--dpi", "40", "--out", root / "f.png"])
    assert first[0][0] == 0, first
    recipe = json.loads((root / "f.png.recipe.json").read_text())

    def edited(name, edit) -> Path:
        r = json.loads(json.dumps(recipe))
        edit(r)
        (root / name).write_text(json.dumps(r))
        return root / name

    cases = {
        "vmax inf": ["figure", TEXT, "--text", S, "--vmax", "inf", "--out", root / "a.png"],
        "vmax 1e400": ["figure", TEXT, "--text", S, "--vmax", "1e400", "--out", root / "a.png"],
        "recipe vmax Infinity": [
            "figure",
            "--recipe",
            edited("inf.json", lambda r: r["view"].update(vmax=float("inf"))),
            "--out",
            root / "a.png",
        ],
        "10,000 keys": [
            "figure",
            "--recipe",
            edited("many.json", lambda r: r["options"].update({f"k{i}": i for i in range(10_000)})),
            "--out",
            root / "b.png",
        ],
        "1 MB key": [
            "figure",
            "--recipe",
            edited("mb.json", lambda r: r["options"].update({"x" * 2**20: 1})),
            "--out",
            root / "c.png",
        ],
        "escape key": [
            "figure",
            "--recipe",
            edited("esc.json", lambda r: r["inputs"].update({"\x1b[2J\nx": 1})),
            "--out",
            root / "d.png",
        ],
    }
    results = run_cli_each(*cases.values())
    return {"first": root / "f.png", "root": root, **dict(zip(cases, results))}


@pytest.mark.parametrize(
    "case, words",
    [
        # the flag and its number as typed (ux28, small29): 1e400, not the float inf argparse read
        ("vmax inf", ("attnviz: error: --vmax inf:", "> 0")),
        ("vmax 1e400", ("attnviz: error: --vmax 1e400:", "> 0")),
        # (a recipe's Infinity was refused already, by the recipe's type check)
        ("recipe vmax Infinity", ("attnviz: error: inf.json: view.vmax is Infinity; give a number or null",)),
    ],
)
def test_infinite_vmax_refused(ran, case, words):
    rc, err = ran[case]
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith(words[0]) and all(w in lines[0] for w in words), err
    assert not (ran["root"] / "a.png").exists()


@pytest.mark.parametrize(
    "case, out, words",
    [
        ("10,000 keys", "b.png", ("options.k0, options.k1", "options.k7, and 9,992 more not read")),
        ("1 MB key", "c.png", ("options.'xxxx", "… (1,048,576 characters) not read",)),
        ("escape key", "d.png", ("inputs.'\\x1b[2J\\nx' not read",)),
    ],
)  # fmt: skip
def test_unknown_keys_one_short_line(ran, case, out, words):
    """Exit 0, the figure the recipe draws without the keys (the first figure's bytes), one note line of a few
    hundred characters at most, no raw escape code."""
    rc, err = ran[case]
    assert rc == 0, err
    notes = [ln for ln in err.splitlines() if "not read" in ln]
    assert len(notes) == 1 and len(notes[0]) < 400 and "\x1b" not in err, err[:2000]
    assert all(w in notes[0] for w in words), notes[0]
    assert (ran["root"] / out).read_bytes() == ran["first"].read_bytes()
