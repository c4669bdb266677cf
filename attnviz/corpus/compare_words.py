"""The lines ``attnviz compare`` (one input, a corpus, the window) says about the two models themselves: which
one a problem came from, and two models with no attention site in common."""

from __future__ import annotations

from pathlib import Path

from attnviz import AttnvizError


def side_error(side: str, path, e: AttnvizError) -> AttnvizError:
    """``e`` from one of the two models, saying which ("this model's positions stop at 128": A's or B's?)."""
    p = Path(path)
    named = f"{p.parent.name}/{p.name}" if p.name == "model.onnx" and p.parent.name else p.name
    return AttnvizError(f"model {side} ({named}): {e}", param=e.param)


def no_shared_site(unmatched: list[str], b: str = "B") -> str:
    """The one line for two models with no site in common.  The same reason at every site (MiniLM's 12 heads
    against a 6-head copy: six times "12 heads in A, 6 in B") is said once; else the first three, and the fix."""
    fix = "compare two checkpoints of the same architecture (the same layers, and heads per layer)"
    why = [u.split(": ", 1)[-1] for u in unmatched]
    if why and all(w == why[0] for w in why):
        where = "at its one site" if len(why) == 1 else f"at all {len(why)} sites"
        return f"A and {b} share no attention site to compare: {why[0]} {where}; {fix}"
    shown = "; ".join(unmatched[:3]) + (f"; and {len(unmatched) - 3} more" if len(unmatched) > 3 else "")
    return f"A and {b} share no attention site to compare ({shown}); {fix}"


def generated_apart(ra, rb, off: str = "without --generate") -> str:
    """The line for two models whose greedy generations part (their maps are over different sequences): both
    generations, and the fix for this kind of model.  An encoder-decoder compares teacher-forced on one target
    (--text-pair); a decoder-only model has no --text-pair (sentence B of an encoder), so its fix is the one
    sequence as its text (the line sent decoder-only users to a flag their model refuses).  ``off``: how generation
    is turned off for this command line (without the flag typed, or --generate 0 where the default generated)."""
    a, b = " ".join(ra.generated or []), " ".join(rb.generated or [])
    said = f"A and B generated different tokens (A: “{a}”; B: “{b}”), so their maps are over different sequences"
    if ra.info.get("kind") == "decoder":
        return f"{said}; compare them on one sequence: the prompt and A's (or B's) words as --text, {off}"
    return f"{said}; compare them teacher-forced on one target (--text-pair '{a}', A's words) or {off}"
