"""Session 28 hostile sweep of flags28's own surfaces: every number flag of every command fed values int()/float()
read and a user may not have meant (``1_0``, Arabic-Indic and full-width digits, 5,000 digits, ``1e400``, blank),
every view flag on every figure view that does not read it (a note, exit 0), ``open --view X`` with flags its tab
does not show, recipes with unknown ``inputs`` / ``options`` keys (typos, 10,000 keys, a 1 MB key, control
characters), and ``open MAPS.npz`` with input flags.

Judged as bench/hostile_sweep.py judges (its run_case: exit 2 with one ``attnviz: error:`` line or argparse's one
line, no library words, every input byte-identical, no orphan, no hang); a case that expects a note also needs
exit 0 and exactly one note line holding the words given.  Run:
``PYTHONPATH=$PWD OMP_NUM_THREADS=1 python bench/hostile_sweep28.py [FILTER]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile_sweep as hs
from hostile_sweep import RESULTS
from hostile_sweep27 import run_case

REPO = hs.REPO
S = "7 2 9 5"
# values int() or float() read as numbers, and ones no number flag may take
ODD_NUMBERS = ("1_0", "٣", "３", "1" + "0" * 5000, "1e400", "", " ", "0x10", "٠.٥")


def note_case(group, label, argv, inputs_root, words) -> None:
    """run_case, expecting exit 0 and one ``attnviz: note:`` line holding ``words``."""
    n = len(RESULTS)
    run_case(group, label, argv, inputs_root, expect="ok")
    if len(RESULTS) == n:
        return  # filtered out
    r = RESULTS[-1]
    notes = [ln for ln in r["stderr"].splitlines() if ln.startswith("attnviz: note:") and all(w in ln for w in words)]
    if len(notes) != 1:
        r["problems"].append(f"{len(notes)} note lines with {words}")
        print(f"       NOTE MISSING {words}", flush=True)


def number_flags() -> list[tuple[str, str, int, bool]]:
    """(command, flag, values it takes, a decimal) for every flag of every command that reads a number."""
    from attnviz.cli import COMMANDS, build_parser
    from attnviz.core.numbers import decimal_arg, whole_arg

    top = build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    out = []
    for name in COMMANDS:
        for a in sub.choices[name]._actions:
            if a.option_strings and a.type in (whole_arg, decimal_arg, int, float):
                n = a.nargs if isinstance(a.nargs, int) else 1
                out.append((name, a.option_strings[-1], n, a.type in (decimal_arg, float)))
    return out


def main() -> None:
    from attnviz.core.view_flags import VIEW_FLAGS

    base = Path(tempfile.mkdtemp(prefix="h28sweep-"))
    IN, OUT = base / "in", base / "out"
    IN.mkdir()
    OUT.mkdir()
    models = IN / "models"
    models.mkdir()
    for m in ("sequence-classification", "translation", "vit-classification"):
        shutil.copy(REPO / "models" / f"{m}.onnx", models)
    TEXT, MT = models / "sequence-classification.onnx", models / "translation.onnx"

    # ---- every number flag of every command -------------------------------------------------------------------
    G = "numbers"
    for command, flag, n, decimal in number_flags():
        for v in ODD_NUMBERS:
            if decimal and v == "1e400":  # a number (inf), left to the flag's own range check, after parsing
                continue
            # argparse refuses each before anything runs (no model, no window: nothing else on the line)
            run_case(G, f"{command} {flag} {v[:12]!r}", [command, flag, *[v] * n], IN, words=(flag,))
    for flag, v in (("--span", "1_0-2_0"), ("--span", "٣-٥"), ("--key-span", "0-１"), ("--layers", "0-٢"),
                    ("--head", "0,١"), ("--block", "٠"), ("--span", "+1-2"), ("--head", "0,,1")):  # fmt: skip
        run_case(G, f"figure {flag} {v!r}", ["figure", TEXT, "--text", S, flag, v, "--out", OUT / "n.pdf"], IN,
                 expect="clean")  # fmt: skip
    for v in ("١٤٠٠x900", "1_400x900", "1400x٩٠٠", "x", "1400X900 "):
        run_case(G, f"open --size {v!r}", ["open", TEXT, "--text", S, "--size", v, "--screenshot", OUT / "n.png"],
                 IN, expect="clean")  # fmt: skip
    for v in ("encoder self ٠:٠", "encoder self 0:１", "encoder self ٠:*"):
        run_case(G, f"ablate --heads {v!r}", ["ablate", TEXT, "--text", S, "--heads", v, "--out", OUT / "ab"], IN)
    for v in ("١:٠", "0:²", "1_0:0"):
        (IN / "src.txt").write_text("7 2 9 5\n")
        run_case(G, f"align --head {v!r}", ["align", MT, "--src", IN / "src.txt", "--head", v, "--out",
                                            OUT / "a.txt"], IN)  # fmt: skip

    # ---- view flags on views that do not read them: a note, the figure drawn ----------------------------------
    G = "view flags"
    values = {"query": "1", "rows": "input", "hide_special": None, "keep": "0.5", "log": None, "scale": "shared",
              "vmax": "0.5", "cmap": "gray", "image_base": "none", "image_from": "tower", "link_cut": "map",
              "picture": "1", "frame": "1"}  # fmt: skip
    text_views = ("heatmap", "overview", "links", "alignment", "strip")
    for view in text_views:
        for f in VIEW_FLAGS:
            if view in f.views or f.dest not in values:
                continue
            given = [f.flag] + ([values[f.dest]] if values[f.dest] is not None else [])
            argv = ["figure", MT, "--text", S, "--view", view, *given, "--dpi", "40", "--out", OUT / "v.png"]
            if f.dest == "frame":  # checked against the result (a text model's blocks have no frames): one line
                run_case(G, f"figure --view {view} {' '.join(given)}", argv, IN, words=(f.flag,))
            else:
                note_case(G, f"figure --view {view} {' '.join(given)}", argv, IN, (f"the {view} view", f.flag))
    every = [a for f in VIEW_FLAGS if f.dest in values and f.dest not in ("picture", "frame", "rows")
             for a in [f.flag] + ([values[f.dest]] if values[f.dest] is not None else [])]  # fmt: skip
    for view in ("heatmap", "links", "overview"):
        note_case(G, f"figure --view {view} with every view flag", ["figure", MT, "--text", S, "--view", view, *every,
                                                                    "--dpi", "40", "--out", OUT / "e.png"], IN,
                  (f"the {view} view",))  # fmt: skip
    for v in ("inf", "1e400", "-inf"):  # (found here: --vmax inf drew every weight in the lowest colour, exit 0)
        run_case(G, f"figure --vmax {v}", ["figure", TEXT, "--text", S, "--vmax", v, "--out", OUT / "i.png"], IN,
                 words=("vmax",))  # fmt: skip
    note_case(G, "figure --all-heads --view links --log", ["figure", TEXT, "--text", S, "--view", "links", "--log",
                                                           "--all-heads", "--dpi", "20", "--out", OUT / "heads"], IN,
              ("the links view", "--log"))  # fmt: skip
    rdir = IN / "rv"
    rdir.mkdir()
    r = subprocess.run([sys.executable, "-m", "attnviz", "figure", TEXT, "--text", S, "--dpi", "40", "--out",
                        rdir / "f.png"], env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    note_case(G, "figure --recipe (heatmap) --link-cut map", ["figure", "--recipe", rdir / "f.png.recipe.json",
                                                              "--link-cut", "map", "--out", OUT / "r.png"], IN,
              ("the heatmap view", "--link-cut"))  # fmt: skip
    for view in ("heatmap", "Head map", "HEAD", "stats", "Token links"):
        note_case(G, f"open --view {view!r} --image-base none --link-cut map",
                  ["open", MT, "--text", S, "--view", view, "--image-base", "none", "--link-cut", "map", "--size",
                   "600x400", "--screenshot", OUT / "o.png"], IN, ("tab does not show",))  # fmt: skip
    run_case(G, "open --view nope --link-cut map", ["open", MT, "--text", S, "--view", "nope", "--link-cut", "map",
                                                    "--screenshot", OUT / "o.png"], IN, expect="clean")  # fmt: skip
    run_case(G, "open --view heatmap --link-cut map, screenshot fails", ["open", models / "nope.onnx", "--view",
                                                                         "heatmap", "--link-cut", "map",
                                                                         "--screenshot", OUT / "o.png"], IN)  # fmt: skip

    # ---- recipes with keys nothing reads ----------------------------------------------------------------------
    G = "recipe keys"
    recipe = json.loads((rdir / "f.png.recipe.json").read_text())

    def edited(label, edit, words, expect_note=True):
        rec = json.loads(json.dumps(recipe))
        edit(rec)
        f = rdir / ("k-" + "".join(c if c.isalnum() else "_" for c in label)[:40] + ".recipe.json")
        f.write_text(json.dumps(rec))
        argv = ["figure", "--recipe", f, "--out", OUT / "k.png"]
        if expect_note:
            note_case(G, label, argv, IN, words)
        else:
            run_case(G, label, argv, IN, expect="clean")

    edited("options.vmx", lambda r: r["options"].update(vmx=0.5), ("options.vmx", "view.vmax"))
    edited("options.max_token", lambda r: r["options"].update(max_token=2), ("options.max_tokens",))
    edited("inputs.txt", lambda r: r["inputs"].update(txt="x"), ("inputs.txt", "inputs.text"))
    edited("10,000 option keys", lambda r: r["options"].update({f"k{i}": i for i in range(10_000)}),
           ("and 9,992 more",))  # fmt: skip
    edited("a 1 MB key", lambda r: r["options"].update({"x" * 2**20: 1}), ("1,048,576 characters",))
    edited("a key with ESC and newline", lambda r: r["inputs"].update({"\x1b[2J\nx": 1}), ("inputs.",))
    edited("an empty key", lambda r: r["options"].update({"": 1}), ("options.''",))
    edited("every known key", lambda r: r["options"].update(max_seconds=None, variant=None, beams=None), (),
           expect_note=False)  # fmt: skip
    edited("options not an object", lambda r: r.update(options=[1, 2]), (), expect_note=False)
    edited("inputs a string", lambda r: r.update(inputs="text"), (), expect_note=False)

    # ---- open MAPS.npz with inputs ----------------------------------------------------------------------------
    G = "open maps"
    maps = IN / "m.npz"
    subprocess.run([sys.executable, "-m", "attnviz", "extract", TEXT, "--text", S, "--out", maps],
                   env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, check=True)  # fmt: skip
    (IN / "doc.txt").write_text(S + "\n")
    for given in (["--text-file", IN / "doc.txt"], ["--text", ""], ["--generate", "0"], ["--image", IN / "nope.png"],
                  ["--tokenizer", IN / "doc.txt"], ["--max-tokens", "3"], ["--variant", "int8"],
                  ["--text-file", IN / "nope.txt"]):  # fmt: skip
        run_case(G, f"open m.npz {given[0]}", ["open", maps, *given, "--screenshot", OUT / "m.png"], IN,
                 words=(given[0],))  # fmt: skip
    run_case(G, "open m.npz alone", ["open", maps, "--size", "600x400", "--screenshot", OUT / "m.png"], IN,
             expect="ok")  # fmt: skip

    print(f"\n{sum(1 for r in RESULTS if r['problems'])} of {len(RESULTS)} cases failed")
    (Path(os.environ.get("SWEEP_JSON", base / "results.json"))).write_text(json.dumps(RESULTS, indent=1))
    print("results:", os.environ.get("SWEEP_JSON", base / "results.json"))


if __name__ == "__main__":
    main()
