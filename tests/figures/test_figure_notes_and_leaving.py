"""``attnviz figure`` says the run's notes as ``attnviz extract`` says them (one shared function), from a model run and
from the .npz that keeps them; and, as the process's last act, it ends without the interpreter's teardown with every
figure and recipe whole.  Each command a process of its own (forked from one interpreter that imported attnviz):
the exit is the point."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "sequence-classification.onnx"
TEXT = "1 2 3 4 5 6 7 8 9"  # nine tokens of the model's vocabulary, cut to four below

# a witness whose __del__ runs only in the interpreter's teardown (as tests/runtime/test_first_map_imports.py), made
# by the interpreter the commands are forked from: each command's process holds it until its own end
WITNESS = """
class Witness:
    def __del__(self):
        sys.__stderr__.write("teardown ran\\n")
witness = Witness()
"""
FORMATS = ("pdf", "svg", "png")
REFUSED = {
    "bad suffix": [MODEL, "--text", "1 2", "--out", "fig.txt"],
    "no maps": ["--maps", "no.npz", "--out", "f.png"],
}


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> tuple[Path, dict[str, tuple[int, str, str]]]:
    """(the folder, case -> (exit code, stderr, stdout)) of every command below, `attnviz CMD` as the console script
    runs it (main(leave=True); "stay": main(leave=False), the interpreter's teardown after it).  Each is a process of
    its own forked from one interpreter (cli_run.run_cli_forked), in order (the .npz figure reads extract's file):
    its exit, the point here, is its own (os._exit after the exit handlers, or the teardown), and its stdout a file,
    block-buffered as a pipe is, so an unflushed exit would lose it.  Each paid a fresh interpreter's imports before."""
    from cli_run import Alone, bounded, run_cli_forked

    d = tmp_path_factory.mktemp("figure-leaving")
    cases = {
        "extract 4": (["extract", MODEL, "--text", TEXT, "--max-tokens", 4, "--out", d / "maps.npz"], d),
        "figure 4": (["figure", MODEL, "--text", TEXT, "--max-tokens", 4, "--out", d / "a.png"], d),
        "figure npz": (["figure", d / "maps.npz", "--out", d / "b.svg"], d),
        "figure whole": (["figure", MODEL, "--text", "1 2 3", "--out", d / "c.png"], d),
        **{
            fmt: (["figure", MODEL, "--text", TEXT, "--view", "heatmap", "--out", d / f"fig.{fmt}"], d)
            for fmt in FORMATS
        },
        "all heads": (["figure", MODEL, "--text", "1 2 3", "--all-heads", "--out", d / "heads"], d),
    }
    for name, argv in REFUSED.items():
        for how in ("leave", "stay"):
            (d / name / how).mkdir(parents=True)
            cases[f"{name} {how}"] = (["figure", *argv], d / name / how, Alone(leave=how == "leave"))
    results = run_cli_forked(*cases.values(), bound_s=180, prelude=WITNESS, with_stdout=True)
    return d, {name: (*bounded(r[:2]), r[2]) for name, r in zip(cases, results)}


def _notes(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("attnviz: note: ")]


def test_figure_says_the_runs_notes_as_extract_does_from_a_model_and_from_its_npz(ran):
    _, done = ran
    code, err, _ = done["extract 4"]
    assert code == 0, err[-2000:]
    said = _notes(err)
    # by hand: nine tokens, four kept (the note extract has always printed)
    assert said == ["attnviz: note: 9 tokens truncated to the first 4 (--max-tokens 4)"]

    code, err, _ = done["figure 4"]
    assert code == 0, err[-2000:]
    assert _notes(err) == said
    code, err, _ = done["figure npz"]
    assert code == 0, err[-2000:]
    assert _notes(err) == said  # the .npz keeps info["notes"]

    code, err, _ = done["figure whole"]
    assert code == 0 and _notes(err) == []  # nothing cut: nothing said


def test_figure_ends_without_the_teardown_its_files_whole_and_errors_unchanged(ran):
    d, done = ran
    for fmt in FORMATS:
        out = d / f"fig.{fmt}"
        code, err, stdout = done[fmt]
        assert code == 0, err[-2000:]
        assert "teardown ran" not in err  # ended by os._exit once the exit handlers ran
        assert stdout == f"wrote {out}\n"  # the block-buffered stdout was flushed first
        data = out.read_bytes()
        if fmt == "pdf":
            assert data.startswith(b"%PDF-") and data.rstrip().endswith(b"%%EOF")
            if shutil.which("pdftoppm"):  # the whole file parses: poppler draws its page
                subprocess.run(["pdftoppm", "-png", "-r", "30", out, d / "page"], check=True, timeout=60)
                assert (d / "page-1.png").stat().st_size > 0
        elif fmt == "svg":
            assert data.rstrip().endswith(b"</svg>")
        else:  # a PNG ends in its IEND chunk (and its CRC)
            assert data.startswith(b"\x89PNG") and data.endswith(b"IEND\xaeB`\x82")
        recipe = json.loads((d / f"fig.{fmt}.recipe.json").read_text())
        assert recipe["view"]["view"] == "heatmap" and recipe["inputs"]["text"] == TEXT

    code, err, stdout = done["all heads"]
    assert code == 0 and "teardown ran" not in err, err[-2000:]
    n = int(stdout.split("wrote ")[1].split()[0])
    pngs = sorted((d / "heads").glob("*.png"))
    assert len(pngs) == n > 1 and all(p.read_bytes().endswith(b"IEND\xaeB`\x82") for p in pngs)
    assert all(json.loads(Path(f"{p}.recipe.json").read_text())["view"]["head"] is not None for p in pngs)


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_refused_figure_says_the_same_line_and_code_as_with_the_teardown(ran, name):
    _, done = ran
    (left_code, left, _), (stayed_code, stayed, _) = done[f"{name} leave"], done[f"{name} stay"]
    assert "teardown ran" in stayed and "teardown ran" not in left
    assert left_code == stayed_code == 2
    assert left == stayed.replace("teardown ran\n", "") and left.count("\n") == 1
