"""Session 27's sweep of the newest surfaces (bench/hostile_sweep27.py): what it found still wrong, each now one line
that names the input as typed and the fix, exit code 2, nothing written.

* ``figure --span 5-2`` (or a recipe's reversed span) was refused as ``--span [5, 2]``: the list it was parsed
  into, not what was typed.
* ``figure --span -3-5``: argparse read the value as an option and said only "expected one argument", as if none
  had been typed; the line now says how a value that starts with '-' is given (``--span=VALUE``).
* A 5,000-digit ``--span`` or a ``--heads`` of 10,000 stars was echoed whole: one "line" of several screens.
* A recipe entry naming /dev/zero, a FIFO or a folder was "missing (looked in /dev/zero)": the wrong reason.
* ``figure --text-file doc.pdf --out doc.pdf`` replaced the document with the figure (and ``extract``'s ``--out``,
  ``compare --figure``, ``open --screenshot`` likewise): the --text-file is now an input no output may replace.
* ``figure --recipe R --text-file F`` was told to "drop MODEL/--maps/--text/--image/...": the flag typed is named.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from cli_run import run_cli_each

REPO = Path(__file__).resolve().parents[1]
TEXT = REPO / "models" / "sequence-classification.onnx"


def listing(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): ("dir" if p.is_dir() else "fifo" if p.is_fifo() else "link" if p.is_symlink()
                                     else hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(folder.rglob("*"))
    }  # fmt: skip


def recipe_naming(folder: Path, name: str, image_path: str) -> Path:
    """A recipe as 'attnviz figure' writes one (the model beside it), its image entry edited by hand."""
    (folder / "model.onnx").write_bytes(TEXT.read_bytes())
    recipe = {
        "attnviz_recipe": 1,
        "source": {"model": {"path": "model.onnx", "sha256": hashlib.sha256(TEXT.read_bytes()).hexdigest()}},
        "inputs": {"text": "7 2 9 5", "image": {"path": image_path}},
        "output": {"path": "f.png", "format": "png"},
        "view": {"view": "heatmap", "dpi": 40},
    }
    path = folder / f"{name}.recipe.json"
    path.write_text(json.dumps(recipe))
    return path


LONG = "9" * 5000  # past int()'s 4,300-digit limit: argparse's type refuses it


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> dict:
    """Each case's (exit code, stderr, listing before, listing after), all in one interpreter (none can hang: each
    is refused before a model runs, or after a 4-token run of the bundled classifier)."""
    root = tmp_path_factory.mktemp("sweep27")
    os.mkfifo(root / "pipe.png")
    (root / "pics").mkdir()
    for name in ("doc.pdf", "doc.npz", "doc.png"):  # a document named as an output would be: its bytes must stay
        (root / name).write_text("7 2 9 5\n")
    cases = {
        "span reversed": ["figure", TEXT, "--text", "7 2 9 5", "--span", "5-2", "--out", root / "a.pdf"],
        "key-span reversed": ["figure", TEXT, "--text", "7 2 9 5", "--key-span", "3-1", "--out", root / "a.pdf"],
        "span negative": ["figure", TEXT, "--text", "7 2 9 5", "--span", "-3-5", "--out", root / "a.pdf"],
        "span negative, with =": ["figure", TEXT, "--text", "7 2 9 5", "--span=-3-5", "--out", root / "a.pdf"],
        "span 5,000 digits": ["figure", TEXT, "--text", "7 2 9 5", "--span", "0-" + LONG, "--out", root / "a.pdf"],
        "heads 10,000 stars": [
            "ablate",
            TEXT,
            "--text",
            "7 2 9 5",
            "--heads",
            "encoder self 0:" + "*" * 10000,
            "--out",
            root / "ab",
        ],  # fmt: skip
        "recipe image /dev/zero": [
            "figure",
            "--recipe",
            recipe_naming(root, "zero", "/dev/zero"),
            "--out",
            root / "r.png",
        ],  # fmt: skip
        "recipe image a FIFO": ["figure", "--recipe", recipe_naming(root, "fifo", "pipe.png"), "--out", root / "r.png"],
        "figure --out the --text-file": ["figure", TEXT, "--text-file", root / "doc.pdf", "--out", root / "doc.pdf"],
        "extract --out the --text-file": ["extract", TEXT, "--text-file", root / "doc.npz", "--out", root / "doc.npz"],
        "compare --figure the --text-file": [
            "compare",
            TEXT,
            TEXT,
            "--text-file",
            root / "doc.pdf",
            "--out",
            root / "cmp",
            "--figure",
            root / "doc.pdf",
        ],  # fmt: skip
        "open --screenshot the --text-file": [
            "open",
            TEXT,
            "--text-file",
            root / "doc.png",
            "--screenshot",
            root / "doc.png",
        ],  # fmt: skip
        "recipe and --text-file": [
            "figure",
            "--recipe",
            recipe_naming(root, "both", "x.png"),
            "--text-file",
            root / "doc.pdf",
            "--out",
            root / "r.png",
        ],  # fmt: skip
        "recipe image a folder": ["figure", "--recipe", recipe_naming(root, "dir", "pics"), "--out", root / "r.png"],
    }
    before = listing(root)
    results = run_cli_each(*cases.values(), env={"QT_QPA_PLATFORM": "offscreen"})
    return {"after": listing(root), "before": before, **dict(zip(cases, results))}


# (case) -> (words the one line holds, words it must not hold)
WANT = {
    "span reversed": (("--span 5-2:", "0 <= LO <= HI"), ("[5, 2]",)),
    "key-span reversed": (("--key-span 3-1:",), ("[3, 1]",)),
    "span negative": (("argument --span", "write --span=VALUE"), ()),
    "span negative, with =": (("--span", "counted from 0", "'-3-5'"), ()),
    "span 5,000 digits": (("positions must look like 300-399", "(5,002 characters)"), (LONG[:100],)),
    "heads 10,000 stars": (("--heads 'encoder self 0:", "(10,015 characters)", "STACK KIND LAYER:HEAD"), ("*" * 100,)),
    # (small29: refused by its name before it is looked at: outside the recipe's folder, not an image)
    "recipe image /dev/zero": (("inputs.image names /dev/zero", "outside the recipe's folder"), ("missing",)),
    "recipe image a FIFO": (("pipe.png, which is not a regular file",), ("missing",)),
    "figure --out the --text-file": (("--out", "doc.pdf is the --text-file this command reads"), ()),
    "extract --out the --text-file": (("doc.npz is the --text-file this command reads",), ()),
    "compare --figure the --text-file": (("--figure", "doc.pdf is the --text-file this command reads"), ()),
    "open --screenshot the --text-file": (("--screenshot", "doc.png is the --text-file this command reads"), ()),
    "recipe and --text-file": (("--recipe already names the model and inputs; drop --text-file",), ("--text/",)),
    "recipe image a folder": (("pics, which is a folder", "point it at the image's file"), ("missing",)),
}


@pytest.mark.parametrize("case", list(WANT))
def test_one_line_as_typed_exit_2(ran, case):
    rc, err = ran[case]
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1, err[-2000:]
    line = lines[0]
    assert line.startswith(("attnviz: error:", "attnviz figure: error:")) and "Traceback" not in err, line
    assert len(line) < 400, line[:400]
    must, never = WANT[case]
    for w in must:
        assert w in line, (w, line)
    for w in never:
        assert w not in line, (w, line)


def test_nothing_was_written(ran):
    assert ran["after"] == ran["before"]
