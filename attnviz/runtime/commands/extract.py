"""attnviz extract MODEL (--inputs | --text | --image) --out OUT.npz"""

from __future__ import annotations

from attnviz.core.notice import say

# the process may end without the interpreter's teardown once the command returns (cli._leave_at_once): what it
# writes is written and closed by then and its isolation child is stopped by the exit handlers; the teardown was
# ~0.06 s CPU of a ~0.46 s first map (numpy's and onnx's modules and objects collected one by one), first22b
LEAVES_AT_ONCE = True

HELP = "run a model and save every attention map to .npz (attn_000... [B,H,Tq,Tk] + sites JSON)"


def add_arguments(p):
    from attnviz.runtime.commands.common import add_input_arguments, add_variant_argument

    add_input_arguments(p, several_images=True, several_texts=True)
    p.add_argument("--out", required=True, metavar="OUT.npz", help="output file")
    add_variant_argument(p)


def run(args) -> int:
    from pathlib import Path

    from attnviz import AttnvizError
    from attnviz.core.writes import guard
    from attnviz.runtime.commands.common import analyze_from_args

    out = Path(args.out)
    if out.suffix != ".npz":
        raise AttnvizError(f"--out {out}: must end in .npz")
    guard(
        {
            "the model": args.model,
            "the --inputs file": args.inputs,
            "the --image file": args.image,
            "the --tokenizer file": args.tokenizer,
            "the --text-file": getattr(args, "text_file", None),
        },
        {"--out": out},
    )
    asked = args.generate  # None: the window's steps for the model's kind (analyze_from_args sets them)
    model, result = analyze_from_args(args)  # (first: it starts the isolation child before numpy is imported)
    # the steps the run took, in the .npz: the window opened on it shows them, figure --maps and a recipe name them
    result.info["generate"] = int(args.generate or 0)
    from attnviz.core import limits
    from attnviz.core.io import save_npz, written_bytes
    from attnviz.core.prediction import prediction
    from attnviz.core.rows import beam_rows, score_text
    from attnviz.core.text_scores import TextScores
    from attnviz.core.words import count
    from attnviz.runtime.run_notes import say_run_notes

    mb = sum(written_bytes(m) for m in result.maps) / 2**20
    limits.check("output_mb", mb, f"the maps for {out.name}{_frames_said(result.maps)}")  # before on-demand maps
    predicted = prediction(result, model.meta)
    if predicted is not None:  # kept in the file: the maps file holds no outputs, and the window on it shows this
        result.info["prediction"] = predicted
    save_npz(result, out)
    dev = result.info.get("provider", "?")
    note = result.info.get("provider_note")
    timing = _timing(result, None if asked is not None else int(args.generate or 0))
    src = model.path  # optimum's MODEL/onnx/ folder: "onnx" alone says little
    name = f"{src.parent.name}/{src.name}" if src.is_dir() and src.name == "onnx" else src.name
    print(
        f"wrote {out}: {count(len(result.maps), 'map')} ({mb:.1f} MB) from {name} on {dev}"
        f"{' (' + note + ')' if note else ''}; {timing}"
    )
    beams = beam_rows(result)
    if beams is not None:  # --beams: every hypothesis, best first, as the .npz's batch rows hold them
        for i, b in enumerate(beams):
            words = " ".join(_shown(str(t)) for t in b.get("generated") or [])
            score = b.get("score")
            said = score_text(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else "?"
            print(f"beam {i} (score {said}): {words}")
    elif result.generated:
        print("generated: " + " ".join(_shown(t) for t in result.generated))
    if predicted is not None:  # a classifier's class (a forecaster's values), in the words of the window's sidebar
        print(f"prediction: {predicted}")
    scores = TextScores.from_info(result.info)
    if scores is not None:  # a dual encoder: each text's score against the image, as the model defines it
        print(f"scores: {scores.words}")
        for line in scores.lines():
            print(f"  {line}")
    for note in result.info.get("fidelity") or ():  # the export lacks part of the model's eager attention
        say(note, "warning")
    # what --max-tokens cut, an unknown-token text, the sound's notes (open and the window say them; the .npz keeps them)
    say_run_notes(result.info)
    return 0


def _shown(token: str) -> str:
    """A generated token on the one ``generated:`` line, its newlines and tabs drawn as the views draw them (↵, ⇥;
    a blank token ␣, core/view/labels.py) but never shortened: printed raw, a tiny PaliGemma's three "\\n" tokens
    were "generated: " and three empty lines, naming no token."""
    s = token.replace("\n", "↵").replace("\t", "⇥").replace("\r", "")
    return s if s.strip() else "␣"


def _timing(result, default_steps: int | None = None) -> str:
    """How long the run took, as the user would time it: a generation's whole time (through the cache there is no
    single run to time, and a full re-run's last pass is a fraction of it: "run 1.6 ms" for a 3-beam search that
    took half a second), with that last pass after it where there was one.  ``default_steps``: the steps taken
    without --generate (the window's default), said with the generation, so that it is never a surprise."""
    from attnviz.core.rows import beam_rows
    from attnviz.core.words import count

    info = result.info
    gen_s = info.get("generate_s") or 0.0
    run = f"run {(info.get('run_s') or 0.0) * 1000:.1f} ms"
    if not gen_s:
        return run
    how = info.get("generation") or ""
    beams = beam_rows(result)
    if beams is not None:
        steps = info.get("beam_steps") or max(len(b.get("generated") or []) for b in beams)
        done = f"searched {len(beams)} beams over {count(int(steps), 'step')}"
    else:
        done = f"generated {count(len(result.generated), 'token')}"
    if default_steps is not None:  # (a beam search's too: --beams alone searches the default steps)
        done += f" ({count(default_steps, 'step')} by default, as the window; --generate 0 for none)"
    said = f"{done} in {gen_s * 1000:.1f} ms ({how})" if how else f"{done} in {gen_s * 1000:.1f} ms"
    return f"{said}, {run}" if "run_s" in info else said


def _frames_said(maps: list) -> str:
    """A vision tower's frames counted as what is written, their own maps (never the block-diagonal map, the frame
    count times larger), said where the size is refused: the size falls with the frames, i.e. a smaller image."""
    from attnviz.core.frames import FramesMap

    counts = [len(m.sizes) for m in maps if isinstance(m, FramesMap)]
    if not counts:
        return ""
    return f" (a vision tower's {max(counts)} frames counted as their own maps; a smaller image makes fewer frames)"
