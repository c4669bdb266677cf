"""A beam's score near zero is printed so a researcher can read it: "score -0.000" (a negative zero, or a tiny
negative rounded) said neither that it is 0 nor which beam scored higher.  One rule (core/rows.py's score_text)
for extract's lines, a figure's title and the window (tests/gui/test_beam_run_section.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from attnviz.cli import main
from attnviz.core.rows import score_text

DEMO = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"
TEXT = "μακάριοι οἱ πτωχοὶ τῷ πνεύματι"
SCORES = [-0.0, -0.00031, -0.5554]  # best first, as a search ranks them


@pytest.mark.parametrize("x", [0.0, -0.0, -0.5554, -12.34567, -0.0003, -0.00031234, -3.1e-7, 2e-9, -0.0009])
def test_a_score_reads_back_as_itself_and_never_as_minus_zero(x):
    said = score_text(x)
    assert float(said) != 0 or x == 0  # a score that is not 0 never reads as one
    if x == 0:
        assert said == "0.000"  # a negative zero is no score below 0
    elif abs(x) >= 0.0005:
        assert said == f"{x:.3f}"  # three places where they say it
    else:  # read back: the same sign and within 2 significant digits
        assert math.copysign(1, float(said)) == math.copysign(1, x)
        assert abs(float(said) - x) <= 0.05 * abs(x)


def test_extract_and_the_figure_title_say_the_scores_so(tmp_path, capsys, monkeypatch):
    """The demo's search, its three hypotheses given the scores above: extract's lines, and the title of the
    figure of beam 1 (read from the .npz, which keeps the scores)."""
    import attnviz.runtime.beam_result as br

    real = br.merge_beams

    def scored(results, hyps):
        out = real(results, hyps)
        for b, s in zip(out.info["beams"], SCORES):
            b["score"] = s
        return out

    monkeypatch.setattr(br, "merge_beams", scored)
    out = tmp_path / "b.npz"
    argv = ["extract", str(DEMO), "--text", TEXT, "--generate", "4", "--beams", "3", "--out", str(out)]
    assert main(argv) == 0
    said = [line.split(":")[0] for line in capsys.readouterr().out.splitlines() if line.startswith("beam ")]
    assert said == ["beam 0 (score 0.000)", "beam 1 (score -0.00031)", "beam 2 (score -0.555)"]
    svg = tmp_path / "b1.svg"
    assert main(["figure", str(out), "--batch-index", "1", "--out", str(svg), "--no-recipe"]) == 0
    text = svg.read_text(encoding="utf-8")
    assert "beam 1 (score -0.00031)" in text and "-0.000)" not in text
