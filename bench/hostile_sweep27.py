"""Session 27 hostile-input sweep of the surfaces sessions 26-27 added: --text-file, figure --span/--key-span,
--link-cut, several --image with --text on a dual encoder (CLIP / SigLIP), --scale/--log on views without an image,
open --memory, hand-edited recipes (texts, link_cut, span, paths out of the folder), ablate/compare --heads 'L:*'
forms, train --set values, and --out aimed at an existing file, a read-only folder or the model itself.

Judged as bench/hostile_sweep.py judges (its run_case: exit 2 with one ``attnviz: error:`` line, no library words,
every input file byte-identical, no orphan, no hang).  Run:
``PYTHONPATH=$PWD OMP_NUM_THREADS=1 python bench/hostile_sweep27.py [FILTER]`` (the dual-encoder cases need the
test cache's CLIP/SigLIP exports and transformers for their tokenizer: tests/dual_cache.py builds them).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import sys
import tempfile
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile_sweep as hs
from hostile_sweep import RESULTS
from hostile_sweep import run_case as _run_case

REPO = hs.REPO
S = "7 2 9 5"


ARGPARSE_LINE = re.compile(r"^attnviz [a-z-]+: error: .*; see 'attnviz [a-z-]+ --help'$")


def run_case(*args, **kw) -> None:
    """hostile_sweep.run_case, with argparse's one line (``attnviz figure: error: ...; see '... --help'``, the
    parser's own prefix: cli.OneLineParser) counted as the one line it is."""
    n = len(RESULTS)
    _run_case(*args, **kw)
    if len(RESULTS) > n:
        r = RESULTS[-1]
        lines = [ln for ln in r["stderr"].splitlines() if ln.strip()]
        if r["rc"] == 2 and len(lines) == 1 and ARGPARSE_LINE.match(lines[0]) and "1 stderr lines" in r["problems"]:
            r["problems"].remove("1 stderr lines")
            print("       (argparse's one line: ok)", flush=True)


def dual_folder(arch: str, into: Path) -> Path | None:
    """A dual encoder's folder (model.onnx + its tokenizer) from the test cache, or None where it is not built."""
    hit = sorted(p for p in hs.CACHE.glob(f"hf-dual-{arch}_model-*") if (p / f"{arch}_model.onnx").is_file())
    if not hit:
        return None
    sys.path.insert(0, str(REPO / "tests"))
    import hf_models

    into.mkdir(parents=True)
    shutil.copy(hit[-1] / f"{arch}_model.onnx", into / "model.onnx")
    hf_models.word_tokenizer(99, bert_style=False).save_pretrained(str(into))
    return into / "model.onnx"


def png_bomb(path: Path, w: int, h: int) -> Path:
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 100))
                     + chunk(b"IEND", b""))  # fmt: skip
    return path


def main() -> None:
    base = Path(tempfile.mkdtemp(prefix="h27sweep-"))
    IN, OUT = base / "in", base / "out"
    IN.mkdir()
    OUT.mkdir()
    models = IN / "models"
    models.mkdir()
    for m in ("sequence-classification", "translation", "vit-classification"):
        shutil.copy(REPO / "models" / f"{m}.onnx", models)
    TEXT = models / "sequence-classification.onnx"
    MT = models / "translation.onnx"
    images = hs.make_images(IN / "img")
    txt = IN / "txt"
    txt.mkdir()

    # ---- --text-file ------------------------------------------------------------------------------------------
    G = "text-file"
    (txt / "bin.txt").write_bytes(images["good"].read_bytes())
    (txt / "bad.txt").write_bytes(b"7 2 \xff\xfe 9\n")
    (txt / "empty.txt").write_bytes(b"")
    (txt / "nl.txt").write_bytes(b"\n")
    (txt / "bom.txt").write_bytes(b"\xef\xbb\xbf")
    (txt / "ws.txt").write_bytes(b"   \n\t \n")
    (txt / "nul.txt").write_bytes(b"7 2\x00 9 5\n")
    (txt / "u16.txt").write_bytes("7 2 9 5\n".encode("utf-16"))
    (txt / "dir.txt").mkdir()
    os.mkfifo(txt / "fifo.txt")
    big = base / "2g.txt"  # outside the inputs' folder: the check would hash its 2 GiB after every case
    with open(big, "wb") as f:  # sparse: 2 GiB of NUL bytes on no disk
        f.truncate(2 * 2**30)
    (txt / "good.txt").write_text(S + "\n")
    os.symlink("/dev/zero", txt / "zero.txt")
    tf = {"binary (a PNG)": txt / "bin.txt", "bad UTF-8": txt / "bad.txt", "empty": txt / "empty.txt",
          "only a newline": txt / "nl.txt", "only a BOM": txt / "bom.txt", "only whitespace": txt / "ws.txt",
          "NUL bytes": txt / "nul.txt", "UTF-16": txt / "u16.txt", "a directory": txt / "dir.txt",
          "a FIFO": txt / "fifo.txt", "2 GiB sparse": big, "/dev/zero link": txt / "zero.txt",
          "missing": txt / "nope.txt"}  # fmt: skip
    for label, f in tf.items():
        expect = "clean" if label in ("NUL bytes", "only whitespace") else "error"
        run_case(G, f"extract {label}", ["extract", TEXT, "--text-file", f, "--out", OUT / "t.npz"], IN, expect=expect)
    for label in ("a FIFO", "2 GiB sparse", "bad UTF-8", "a directory"):
        f = tf[label]
        run_case(G, f"figure {label}", ["figure", TEXT, "--text-file", f, "--out", OUT / "t.pdf"], IN)
        run_case(G, f"compare {label}", ["compare", TEXT, TEXT, "--text-file", f, "--out", OUT / "tc"], IN)
        run_case(G, f"open {label}", ["open", TEXT, "--text-file", f, "--screenshot", OUT / "t.png"], IN)
    run_case(G, "--text and --text-file", ["extract", TEXT, "--text", S, "--text-file", tf["bad UTF-8"], "--out",
                                           OUT / "t.npz"], IN)  # fmt: skip
    run_case(G, "--text-file twice", ["extract", TEXT, "--text-file", txt / "good.txt", "--text-file",
                                      txt / "good.txt", "--out", OUT / "t.npz"], IN, expect="clean")  # fmt: skip
    run_case(G, "ablate --text-file", ["ablate", TEXT, "--text-file", txt / "good.txt", "--all-heads", "--out",
                                       OUT / "ta"], IN, expect="clean")  # fmt: skip

    # ---- figure --span / --key-span ---------------------------------------------------------------------------
    G = "span"
    for flag in ("--span", "--key-span"):
        for v in ("-3-5", "5-2", "0-99999", "99-120", "a-b", "", "3", "1.5-3", "0-" + "9" * 5000, "nan-3", "--",
                  "1_0-2_0", "٣-٥", " 1-2 "):  # fmt: skip
            run_case(G, f"{flag} {v[:20]!r}", ["figure", TEXT, "--text", S, flag, v, "--out", OUT / "s.pdf"], IN,
                     expect="clean")  # fmt: skip
    run_case(G, "--span on the overview", ["figure", TEXT, "--text", S, "--view", "overview", "--span", "0-2", "--out",
                                           OUT / "s.pdf"], IN)  # fmt: skip
    run_case(G, "--span on links", ["figure", TEXT, "--text", S, "--view", "links", "--span", "0-2", "--out",
                                    OUT / "s.pdf"], IN)  # fmt: skip
    run_case(G, "--span on a maps file without tokens", ["figure", TEXT, "--text", S, "--span", "0-1", "--key-span",
                                                         "2-3", "--view", "alignment", "--out", OUT / "s.pdf"], IN,
             expect="clean")  # fmt: skip

    # ---- --link-cut -------------------------------------------------------------------------------------------
    G = "link-cut"
    for v in ("nope", "", "ROW", "row,map"):
        run_case(G, f"figure --link-cut {v!r}", ["figure", TEXT, "--text", S, "--view", "links", "--link-cut", v,
                                                 "--out", OUT / "l.pdf"], IN)  # fmt: skip
        run_case(G, f"open --link-cut {v!r}", ["open", TEXT, "--text", S, "--link-cut", v, "--screenshot",
                                               OUT / "l.png"], IN)  # fmt: skip
    run_case(G, "--link-cut map on a heatmap", ["figure", TEXT, "--text", S, "--link-cut", "map", "--out",
                                                OUT / "l.pdf"], IN, expect="clean")  # fmt: skip

    # ---- --scale / --log on views without an image ------------------------------------------------------------
    G = "scale"
    for view in ("heatmap", "links", "overview", "alignment"):
        run_case(G, f"figure --view {view} --scale shared --log", ["figure", TEXT, "--text", S, "--view", view,
                                                                    "--scale", "shared", "--log", "--out",
                                                                    OUT / "sc.pdf"], IN, expect="clean")  # fmt: skip
    run_case(G, "figure --scale map --vmax -1", ["figure", TEXT, "--text", S, "--scale", "map", "--vmax", "-1",
                                                 "--out", OUT / "sc.pdf"], IN, expect="clean")  # fmt: skip
    run_case(G, "figure --log --vmax 0", ["figure", TEXT, "--text", S, "--log", "--vmax", "0", "--out",
                                          OUT / "sc.pdf"], IN, expect="clean")  # fmt: skip
    run_case(G, "figure --log --vmax nan", ["figure", TEXT, "--text", S, "--log", "--vmax", "nan", "--out",
                                            OUT / "sc.pdf"], IN, expect="clean")  # fmt: skip
    run_case(G, "open --scale shared --log (text model)", ["open", TEXT, "--text", S, "--scale", "shared", "--log",
                                                           "--screenshot", OUT / "sc.png"], IN,
             expect="clean")  # fmt: skip
    run_case(G, "open --scale nope", ["open", TEXT, "--scale", "nope"], IN)

    # ---- open --memory ----------------------------------------------------------------------------------------
    G = "memory"
    for v in ("nope", "", "DENSE", "0"):
        run_case(G, f"open --memory {v!r}", ["open", TEXT, "--text", S, "--memory", v, "--screenshot",
                                             OUT / "m.png"], IN)  # fmt: skip
    for v in ("0", "-1", "nan", "1e400", "x"):
        run_case(G, f"open --max-memory {v}", ["open", TEXT, "--text", S, "--max-memory", v, "--screenshot",
                                               OUT / "m.png"], IN)  # fmt: skip

    # ---- ablate / compare --heads 'L:*' -----------------------------------------------------------------------
    G = "heads"
    for spec in ("encoder self 3:*", "encoder self 99:*", "encoder self *:*", "encoder self *:0", "encoder self 0:**",
                 "encoder self :*", "encoder self 0:*,encoder self 0:*", "encoder self 0:*,encoder self 0:1",
                 "encoder self -1:*", "encoder self 0: *", "encoder self 0:*1", "decoder cross 0:*", "* self 0:*",
                 "encoder self 0:*-1", "encoder self 0:*;1", "encoder self 0:" + "*" * 10000):  # fmt: skip
        run_case(G, f"ablate --heads {spec[:40]!r}", ["ablate", TEXT, "--text", S, "--heads", spec, "--out",
                                                      OUT / "h"], IN, expect="clean")  # fmt: skip
    run_case(G, "compare --figure-head 'encoder self 0:*'", ["compare", TEXT, TEXT, "--text", S, "--figure",
                                                             OUT / "hc.pdf", "--figure-head", "encoder self 0:*",
                                                             "--out", OUT / "hc"], IN, expect="clean")  # fmt: skip
    run_case(G, "compare --heads 'encoder self 0:*'", ["compare", TEXT, TEXT, "--text", S, "--heads",
                                                       "encoder self 0:*", "--out", OUT / "hc2"], IN,
             expect="clean")  # fmt: skip
    run_case(G, "ablate MT --heads 'decoder cross 9:*'", ["ablate", MT, "--text", "μακάριοι", "--heads",
                                                          "decoder cross 9:*", "--out", OUT / "hm"], IN)  # fmt: skip

    # ---- dual encoders: several --image with --text -----------------------------------------------------------
    for arch in ("clip", "siglip"):
        m = dual_folder(arch, IN / arch)
        if m is None:
            print(f"skip [{arch}]: no cached export (run tests/runtime/test_dual_scores.py once)")
            continue
        G = f"dual {arch}"
        from PIL import Image

        good = IN / f"{arch}-good.png"
        Image.new("RGB", (32, 32), "green").save(good)
        bomb = png_bomb(IN / f"{arch}-bomb.png", 60000, 60000)
        bad = {"text named .png": images["text named .png"], "truncated png": images["truncated png"],
               "0-byte": images["empty file"], "60000x60000 header": bomb, "a folder": images["folder named x.png"],
               "a FIFO": images["fifo"], "missing": IN / "nope.png"}  # fmt: skip
        for label, b in bad.items():
            run_case(G, f"second image {label}", ["extract", m, "--image", good, "--image", b, "--text", "a cat",
                                                  "--text", "a dog", "--out", OUT / "d.npz"], IN)  # fmt: skip
        run_case(G, "one image given twice", ["extract", m, "--image", good, "--image", good, "--text", "a cat",
                                              "--text", "a dog", "--out", OUT / "d.npz"], IN, expect="clean")  # fmt: skip
        run_case(G, "one image twice, one text", ["figure", m, "--image", good, "--image", good, "--text", "a cat",
                                                  "--out", OUT / "d.pdf"], IN, expect="clean")  # fmt: skip
        run_case(G, "20 images x 20 texts", ["extract", m, *sum((["--image", good] for _ in range(20)), []),
                                             *sum((["--text", f"t{i}"] for i in range(20)), []), "--out",
                                             OUT / "d.npz"], IN, expect="clean")  # fmt: skip
        run_case(G, "empty text among texts", ["extract", m, "--image", good, "--image", good, "--text", "a cat",
                                               "--text", "", "--out", OUT / "d.npz"], IN, expect="clean")  # fmt: skip
        run_case(G, "--text-file with several images", ["extract", m, "--image", good, "--image", good,
                                                        "--text-file", txt / "good.txt", "--out", OUT / "d.npz"], IN,
                 expect="clean")  # fmt: skip
        run_case(G, "figure --text twice, --out is an image", ["figure", m, "--image", good, "--text", "a", "--text",
                                                               "b", "--out", good], IN)  # fmt: skip
        run_case(G, "figure --scale shared --log several images", ["figure", m, "--image", good, "--image", good,
                                                                   "--text", "a", "--text", "b", "--view", "image",
                                                                   "--scale", "shared", "--log", "--out",
                                                                   OUT / "d2.pdf"], IN, expect="clean")  # fmt: skip
        run_case(G, "--batch past the pairs", ["figure", m, "--image", good, "--image", good, "--text", "a", "--text",
                                               "b", "--batch", "99", "--out", OUT / "d3.pdf"], IN)  # fmt: skip
        run_case(G, "open: second image a bomb", ["open", m, "--image", good, "--image", bomb, "--text", "a",
                                                  "--screenshot", OUT / "d.png"], IN)  # fmt: skip

    # ---- recipes with hand-edited fields ----------------------------------------------------------------------
    G = "recipe"
    rdir = IN / "rec"
    rdir.mkdir()
    shutil.copy(TEXT, rdir / "model.onnx")
    sha = hashlib.sha256((rdir / "model.onnx").read_bytes()).hexdigest()
    secret = base / "secret"  # a file outside the recipe's folder the recipe has no business reading
    secret.mkdir()
    (secret / "private.png").write_bytes(images["good"].read_bytes())

    def recipe(label, edit, expect="clean"):
        rec = {"attnviz_recipe": 1, "source": {"model": {"path": "model.onnx", "sha256": sha}},
               "inputs": {"text": S}, "output": {"path": "f.pdf", "format": "pdf"},
               "view": {"view": "heatmap", "dpi": 40}}  # fmt: skip
        edit(rec)
        f = rdir / ("r-" + "".join(c if c.isalnum() else "_" for c in label)[:40] + ".recipe.json")
        f.write_text(json.dumps(rec))
        run_case(G, label, ["figure", "--recipe", f, "--out", OUT / "rf.pdf"], IN, expect=expect)

    def put(sec, key, val):
        return lambda r: r.setdefault(sec, {}).__setitem__(key, val)

    recipe("good", lambda r: None, expect="ok")
    for val in ([1, 2], [None], ["a", 5], "a,b", [], ["x"] * 100_000, [["a"]], [{"a": 1}], ["a"] * 3):
        recipe(f"inputs.texts={str(val)[:30]}", put("inputs", "texts", val))
    for val in ("nope", 5, None, "", ["row"], "ROW"):
        recipe(f"view.link_cut={val!r} (links)", lambda r, v=val: r["view"].update(view="links", link_cut=v))
    for key in ("span", "key_span"):
        for val in ([-5, 2], [2, 1], [0, 10**12], [0, 99], ["a", "b"], [0], [0, 1, 2], "0-2", 3, [1.5, 2],
                    [True, False], [0, 2**70]):  # fmt: skip
            recipe(f"view.{key}={str(val)[:30]}", put("view", key, val))
    recipe("view.span on the overview", lambda r: r["view"].update(view="overview", span=[0, 1]))
    recipe("view.image_scale=nope", put("view", "image_scale", "nope"))
    recipe("view.log='yes'", put("view", "log", "yes"))
    outside = {"/etc/passwd": "/etc/passwd", "../secret/private.png": "../secret/private.png",
               "abs secret": str(secret / "private.png"), "/dev/zero": "/dev/zero", "/proc/self/environ":
               "/proc/self/environ"}  # fmt: skip
    for label, p in outside.items():
        recipe(f"inputs.image -> {label}", put("inputs", "image", {"path": p, "sha256": "0" * 64}))
        recipe(f"inputs.images[1] -> {label}", put("inputs", "images", [{"path": p, "sha256": "0" * 64}] * 2))
        recipe(f"inputs.tokenizer -> {label}", put("inputs", "tokenizer", {"path": p}))
        recipe(f"source.model -> {label}", lambda r, p=p: r["source"].__setitem__("model", {"path": p}))
        recipe(f"output.path -> {label}", put("output", "path", p))
    recipe("inputs.image abs_path to secret", put("inputs", "image", {"path": "nope.png", "abs_path":
                                                                      str(secret / "private.png")}))  # fmt: skip
    recipe("inputs.text_file", put("inputs", "text_file", "/etc/passwd"))
    recipe("inputs.texts 100k on a text model", put("inputs", "texts", [S] * 100_000))
    recipe("options.memory=nope", put("options", "memory", "nope"))
    recipe("options.mode=ondemand", put("options", "mode", "ondemand"))

    # ---- train --set ------------------------------------------------------------------------------------------
    G = "train --set"
    for k, v in (("n_classes", "1000000000"), ("n_classes", "0"), ("n_classes", "-1"), ("n_classes", "1"),
                 ("n_classes", "2.5"), ("batch_size", "0"), ("batch_size", "-1"), ("batch_size", "1e9"),
                 ("batch_size", "1000000000"), ("steps", "-1"), ("lr", "NaN"), ("lr", "-1"), ("n_train", "0"),
                 ("warmup", "-5"), ("log_every", "0"), ("checkpoint_every", "0"), ("snapshot_every", "-1"),
                 ("max_len", "0"), ("dropout", "2"), ("seed", '"x"'), ("n_classes", "true")):  # fmt: skip
        run_case(G, f"sequence-classification --set {k}={v}", ["train", "sequence-classification", "--preset", "tiny",
                                                                "--steps", "2", "--out", OUT / "tr", "--set",
                                                                f"{k}={v}", "--restart", "--quiet"], IN,
                 expect="clean")  # fmt: skip

    # ---- --out at an existing file, a read-only folder, the model itself --------------------------------------
    G = "out"
    keep = IN / "keep"
    keep.mkdir()
    (keep / "notes.txt").write_text("my notes\n")
    (OUT / "old.npz").write_bytes(b"not a maps file")  # outside the inputs: --out names it, replacing it is asked
    ro = OUT / "ro"
    ro.mkdir()
    (ro / "x").write_text("x")
    os.chmod(ro, 0o555)
    for cmd, extra in (("extract", []), ("figure", []), ("ablate", ["--all-heads"]), ("compare", [TEXT])):
        args = [cmd, TEXT, *extra, "--text", S]
        run_case(G, f"{cmd} --out the model", [*args, "--out", TEXT], IN)
        run_case(G, f"{cmd} --out the models folder", [*args, "--out", models], IN, expect="clean")
        run_case(G, f"{cmd} --out a user's notes.txt", [*args, "--out", keep / "notes.txt"], IN, expect="clean")
        run_case(G, f"{cmd} --out a symlink to the model", [*args, "--out", _link(keep, TEXT)], IN)
    run_case(G, "extract --out an existing non-maps .npz", ["extract", TEXT, "--text", S, "--out", OUT / "old.npz"],
             IN, expect="ok")  # fmt: skip
    run_case(G, "extract --out the --text-file", ["extract", TEXT, "--text-file", txt / "good.txt", "--out",
                                                  txt / "good.txt"], IN)  # fmt: skip
    run_case(G, "figure --out the --text-file", ["figure", TEXT, "--text-file", txt / "good.txt", "--out",
                                                 txt / "good.txt"], IN)  # fmt: skip
    run_case(G, "figure --recipe-out the --text-file", ["figure", TEXT, "--text-file", txt / "good.txt", "--out",
                                                        OUT / "o.pdf", "--recipe-out", txt / "good.txt"], IN)  # fmt: skip
    for suffix in ("pdf", "npz", "png"):  # a document named as an output would be
        (txt / f"doc.{suffix}").write_text(S + "\n")
    run_case(G, "figure --out the --text-file doc.pdf", ["figure", TEXT, "--text-file", txt / "doc.pdf", "--out",
                                                         txt / "doc.pdf"], IN)  # fmt: skip
    run_case(G, "extract --out the --text-file doc.npz", ["extract", TEXT, "--text-file", txt / "doc.npz", "--out",
                                                          txt / "doc.npz"], IN)  # fmt: skip
    run_case(G, "compare --figure the --text-file doc.pdf", ["compare", TEXT, TEXT, "--text-file", txt / "doc.pdf",
                                                             "--out", OUT / "cf", "--figure", txt / "doc.pdf"],
             IN)  # fmt: skip
    run_case(G, "open --screenshot the --text-file doc.png", ["open", TEXT, "--text-file", txt / "doc.png",
                                                              "--screenshot", txt / "doc.png"], IN)  # fmt: skip
    run_case(G, "train --out a file", ["train", "toy-reverse", "--preset", "tiny", "--out", keep / "notes.txt"], IN)
    run_case(G, "train --out a model's folder, no --restart", ["train", "toy-reverse", "--preset", "tiny", "--out",
                                                               models, "--steps", "1"], IN)  # fmt: skip
    run_case(G, "figure --out a read-only folder (root)", ["figure", TEXT, "--text", S, "--out", ro / "x.pdf"], IN,
             expect="clean")  # fmt: skip
    run_case(G, "open --screenshot the model", ["open", TEXT, "--text", S, "--screenshot", TEXT], IN)

    print(f"\n{sum(1 for r in RESULTS if r['problems'])} of {len(RESULTS)} cases failed")
    (Path(os.environ.get("SWEEP_JSON", base / "results.json"))).write_text(json.dumps(RESULTS, indent=1))
    print("results:", os.environ.get("SWEEP_JSON", base / "results.json"))


def _link(folder: Path, target: Path) -> Path:
    link = folder / "model-link.onnx"
    if not link.is_symlink():
        os.symlink(target, link)
    return link


if __name__ == "__main__":
    main()
