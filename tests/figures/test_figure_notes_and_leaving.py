"""``attnviz figure`` says the run's notes as ``attnviz extract`` says them (one shared function), from a model run and
from the .npz that keeps them; and, as the process's last act, it ends without the interpreter's teardown with every
figure and recipe whole.  Run in fresh interpreters: the exit is the point."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "sequence-classification.onnx"
TEXT = "1 2 3 4 5 6 7 8 9"  # nine tokens of the model's vocabulary, cut to four below

# `attnviz CMD` as the console script runs it (main(leave=True)), with a witness whose __del__ runs only in the
# interpreter's teardown (as tests/runtime/test_first_map_imports.py)
LEAVING = """
import sys
class Witness:
    def __del__(self):
        sys.__stderr__.write("teardown ran\\n")
witness = Witness()
from attnviz.cli import main
sys.exit(main(sys.argv[2:], leave=sys.argv[1] == "leave"))
"""


def _script(how: str, *argv, cwd=None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-c", LEAVING, how, *map(str, argv)],
        env=env,
        capture_output=True,  # stdout through a pipe: block-buffered, so an unflushed exit would lose it
        text=True,
        timeout=180,
        cwd=cwd,
    )


def _notes(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("attnviz: note: ")]


def test_figure_says_the_runs_notes_as_extract_does_from_a_model_and_from_its_npz(tmp_path):
    maps = tmp_path / "maps.npz"
    extracted = _script("leave", "extract", MODEL, "--text", TEXT, "--max-tokens", 4, "--out", maps)
    assert extracted.returncode == 0, extracted.stderr[-2000:]
    said = _notes(extracted.stderr)
    # by hand: nine tokens, four kept (the note extract has always printed)
    assert said == ["attnviz: note: 9 tokens truncated to the first 4 (--max-tokens 4)"]

    drawn = _script("leave", "figure", MODEL, "--text", TEXT, "--max-tokens", 4, "--out", tmp_path / "a.png")
    assert drawn.returncode == 0, drawn.stderr[-2000:]
    assert _notes(drawn.stderr) == said
    from_npz = _script("leave", "figure", maps, "--out", tmp_path / "b.svg")
    assert from_npz.returncode == 0, from_npz.stderr[-2000:]
    assert _notes(from_npz.stderr) == said  # the .npz keeps info["notes"]

    whole = _script("leave", "figure", MODEL, "--text", "1 2 3", "--out", tmp_path / "c.png")
    assert whole.returncode == 0 and _notes(whole.stderr) == []  # nothing cut: nothing said


def test_figure_ends_without_the_teardown_its_files_whole_and_errors_unchanged(tmp_path):
    for fmt in ("pdf", "svg", "png"):
        out = tmp_path / f"fig.{fmt}"
        done = _script("leave", "figure", MODEL, "--text", TEXT, "--view", "heatmap", "--out", out)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "teardown ran" not in done.stderr  # ended by os._exit once the exit handlers ran
        assert done.stdout == f"wrote {out}\n"  # the piped stdout was flushed first
        data = out.read_bytes()
        if fmt == "pdf":
            assert data.startswith(b"%PDF-") and data.rstrip().endswith(b"%%EOF")
            if shutil.which("pdftoppm"):  # the whole file parses: poppler draws its page
                subprocess.run(["pdftoppm", "-png", "-r", "30", out, tmp_path / "page"], check=True, timeout=60)
                assert (tmp_path / "page-1.png").stat().st_size > 0
        elif fmt == "svg":
            assert data.rstrip().endswith(b"</svg>")
        else:  # a PNG ends in its IEND chunk (and its CRC)
            assert data.startswith(b"\x89PNG") and data.endswith(b"IEND\xaeB`\x82")
        recipe = json.loads((tmp_path / f"fig.{fmt}.recipe.json").read_text())
        assert recipe["view"]["view"] == "heatmap" and recipe["inputs"]["text"] == TEXT

    heads = _script("leave", "figure", MODEL, "--text", "1 2 3", "--all-heads", "--out", tmp_path / "heads")
    assert heads.returncode == 0 and "teardown ran" not in heads.stderr, heads.stderr[-2000:]
    n = int(heads.stdout.split("wrote ")[1].split()[0])
    pngs = sorted((tmp_path / "heads").glob("*.png"))
    assert len(pngs) == n > 1 and all(p.read_bytes().endswith(b"IEND\xaeB`\x82") for p in pngs)
    assert all(json.loads(Path(f"{p}.recipe.json").read_text())["view"]["head"] is not None for p in pngs)


@pytest.mark.parametrize("argv", [[MODEL, "--text", "1 2", "--out", "fig.txt"], ["--maps", "no.npz", "--out", "f.png"]])
def test_a_refused_figure_says_the_same_line_and_code_as_with_the_teardown(tmp_path, argv):
    left, stayed = (_script(how, "figure", *argv, cwd=tmp_path) for how in ("leave", "stay"))
    assert "teardown ran" in stayed.stderr and "teardown ran" not in left.stderr
    assert left.returncode == stayed.returncode == 2
    assert left.stderr == stayed.stderr.replace("teardown ran\n", "") and left.stderr.count("\n") == 1
