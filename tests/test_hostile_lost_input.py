"""Issue 24, item 1: no command's output ever replaces one of its inputs — not by the same path, a symlink, a hard
link, or a results folder holding an input under an output's name — and an interrupted write keeps the old file.

Every case is refused in one line (exit 2) with the input's bytes unchanged (sha256 before and after) and nothing
written.  The guard is one function (``attnviz.core.writes.guard``); the last test checks nothing writes around it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from onnx_builders import tiny_text_model

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.core import writes

VARIANTS = ("same", "symlink", "hardlink")


def sha(p: Path) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def listing(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with its bytes' digest (links as their targets): nothing added, nothing changed."""
    return {str(p.relative_to(folder)): sha(p) if p.is_file() else "" for p in sorted(folder.rglob("*"))}


def aim(target: Path, where: Path, variant: str) -> Path:
    """An output path that reaches ``target``: itself, a symlink to it, or a hard link to it (in ``where``)."""
    if variant == "same":
        return target
    where.mkdir(parents=True, exist_ok=True)
    link = where / target.name
    if variant == "symlink":
        link.symlink_to(target.resolve())
    else:
        os.link(target, link)
    return link


def refused(capsys, argv, tmp_path: Path, *words: str) -> None:
    before = listing(tmp_path)
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert err.startswith("attnviz: error:") and "\n" not in err and "Traceback" not in err, err
    for w in ("destroy", *words):
        assert w.lower() in err.lower(), (w, err)
    assert listing(tmp_path) == before  # the input's bytes, and nothing written beside them


@pytest.fixture()
def model(tmp_path):
    return tiny_text_model(tmp_path / "model.onnx")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", ["heads.parquet", "examples.parquet", "run.json", "checkpoint.npz"])
def test_corpus_results_folder_never_replaces_the_corpus(model, tmp_path, capsys, name, variant):
    data = tmp_path / "d" / name
    data.parent.mkdir()
    data.write_text("the cat sat\nthe dog ran\n")  # what it holds does not matter: refused before it is read
    out = aim(data, tmp_path / "elsewhere", variant).parent
    refused(capsys, ["corpus", model, "--texts", data, "--out", out, "--no-progress"], tmp_path, "--texts")


@pytest.mark.parametrize("variant", VARIANTS)
def test_corpus_results_folder_never_replaces_the_model_or_tokenizer(tmp_path, capsys, variant):
    (tmp_path / "m").mkdir()
    model = tiny_text_model(tmp_path / "m" / "model.onnx")
    model = model.rename(model.parent / "checkpoint.npz")  # a model file named like the corpus checkpoint
    (tmp_path / "k").mkdir()
    tok = tmp_path / "k" / "run.json"  # and a tokenizer named like the run record
    tok.write_text("{}")
    texts = tmp_path / "t.txt"
    texts.write_text("the cat\n")
    for what, f in (("the model", model), ("the --tokenizer", tok)):
        out = aim(f, tmp_path / f"elsewhere-{f.stem}", variant).parent
        argv = ["corpus", model, "--texts", texts, "--tokenizer", tok, "--out", out, "--no-progress"]
        refused(capsys, argv, tmp_path, what)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", ["heads.parquet", "run.json"])
def test_compare_results_never_replace_a_model(model, tmp_path, capsys, variant, name):
    other = tmp_path / "other.onnx"
    other.write_bytes(model.read_bytes())
    out = tmp_path / "cmp"
    aim(other, out, variant) if variant != "same" else None
    if variant == "same":
        out.mkdir()
        other = other.rename(out / name)
    else:
        (out / other.name).rename(out / name)
    refused(capsys, ["compare", model, other, "--text", "the cat", "--out", out], tmp_path, "model B")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", ["heads.parquet", "run.json"])
def test_ablate_results_never_replace_the_model_or_feeds(model, tmp_path, capsys, variant, name):
    feeds = tmp_path / "f.npz"
    np.savez(feeds, input_ids=np.array([[1, 3, 4, 2]], np.int64))
    for what, target in (("the model", model), ("the --inputs", feeds)):
        out = tmp_path / f"abl-{target.stem}"
        if variant == "same":
            out.mkdir()
            target = target.rename(out / name)
        else:
            (aim(target, out, variant)).rename(out / name)
        argv = [
            "ablate",
            target if what == "the model" else model,
            "--inputs",
            target if what != "the model" else feeds,
        ]
        refused(capsys, [*argv, "--all-heads", "--out", out], tmp_path, what)
        if variant == "same":  # back where the next case finds it
            target.rename(model if what == "the model" else feeds)


@pytest.mark.parametrize("variant", VARIANTS)
def test_extract_never_replaces_its_feeds(model, tmp_path, capsys, variant):
    feeds = tmp_path / "f.npz"
    np.savez(feeds, input_ids=np.array([[1, 3, 4, 2]], np.int64))
    refused(
        capsys,
        ["extract", model, "--inputs", feeds, "--out", aim(feeds, tmp_path / "o", variant)],
        tmp_path,
        "--inputs",
    )


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("which", ["--src", "--tgt", "--gold"])
def test_align_never_replaces_its_sentences_or_gold(model, tmp_path, capsys, variant, which):
    files = {"--src": tmp_path / "a.src", "--tgt": tmp_path / "a.tgt", "--gold": tmp_path / "a.gold"}
    for f, text in zip(files.values(), ("the cat\n", "the cat\n", "0-0 1-1\n")):
        f.write_text(text)
    argv = ["align", model, *[x for kv in files.items() for x in kv]]
    refused(capsys, [*argv, "--out", aim(files[which], tmp_path / "o", variant)], tmp_path, which)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("flag", ["--out", "--recipe-out"])
def test_figure_never_replaces_its_image(model, tmp_path, capsys, variant, flag):
    from PIL import Image

    img = tmp_path / "in.png"
    Image.new("RGB", (4, 4)).save(img)
    out = {"--out": tmp_path / "fig.png", "--recipe-out": tmp_path / "fig.json"}
    out[flag] = aim(img, tmp_path / "o", variant)
    argv = ["figure", model, "--text", "the cat", "--image", img, "--view", "heatmap"]
    refused(capsys, [*argv, "--out", out["--out"], "--recipe-out", out["--recipe-out"]], tmp_path, flag, "image")


@pytest.mark.parametrize("variant", VARIANTS)
def test_train_never_replaces_the_run_it_starts_from(tmp_path, capsys, variant):
    pytest.importorskip("torch")
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.onnx").write_bytes(b"the run it starts from")
    out = aim(src / "model.onnx", tmp_path / "o", variant).parent
    argv = ["train", "toy-reverse", "--preset", "tiny", "--steps", "2", "--quiet", "--set", f"init_from={src}"]
    refused(capsys, [*argv, "--out", out], tmp_path, "init_from")


@pytest.mark.parametrize("variant", VARIANTS)
def test_average_never_replaces_its_run_or_weights(tmp_path, capsys, variant):
    pytest.importorskip("torch")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    (run / "model.onnx").write_bytes(b"the run's model")
    weights = [tmp_path / "a.safetensors", tmp_path / "b.safetensors"]
    for w in weights:
        w.write_bytes(b"weights")
    out = aim(run / "model.onnx", tmp_path / "o", variant).parent
    refused(capsys, ["average", run, "--weights", *weights, "--out", out], tmp_path, "the run folder")


@pytest.mark.parametrize("variant", ["same", "symlink"])
def test_export_hf_never_writes_into_its_model_folder(tmp_path, capsys, variant):
    pytest.importorskip("transformers")
    src = tmp_path / "hf"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"model_type": "bert"}))
    out = src if variant == "same" else tmp_path / "link"
    if variant == "symlink":
        out.symlink_to(src)
    refused(capsys, ["export-hf", src, "--out", out], tmp_path, "the model folder")


def test_the_window_never_exports_onto_its_model(qtbot, tmp_path):
    pytest.importorskip("PySide6")
    from attnviz.gui.main_window import MainWindow

    model = tiny_text_model(tmp_path / "model.onnx")
    win = MainWindow()
    qtbot.addWidget(win)
    shown: list[str] = []
    win.show_error = shown.append  # the window's one-message channel

    class Opened:  # what the window knows of an open model: where it came from
        path = model

    win.session.model = Opened()
    before = sha(model)
    for path in (model, aim(model, tmp_path / "s", "symlink"), aim(model, tmp_path / "h", "hardlink")):
        shown.clear()
        win.export_maps(path)
        win.export_view(path)
        assert shown and all("destroy" in m for m in shown), shown
    assert sha(model) == before


@pytest.mark.parametrize("variant", VARIANTS)
def test_open_screenshot_never_replaces_its_image(model, tmp_path, capsys, variant):
    from PIL import Image

    img = tmp_path / "in.png"
    Image.new("RGB", (4, 4)).save(img)
    shot = aim(img, tmp_path / "o", variant)
    refused(capsys, ["open", img, "--screenshot", shot], tmp_path, "--screenshot", "the file it opens")


# --------------------------------------------------------------------------- atomic writes


def test_corpus_results_interrupted_mid_write_keep_the_previous_ones(tmp_path, monkeypatch):
    """An exception after the temp file is written (before its rename) leaves the previous results whole."""
    import pyarrow.parquet as pq

    from attnviz.corpus import output

    out = tmp_path / "res"
    out.mkdir()
    output.write(out, [{"layer": 0, "head": 0, "score": 1.0}], [], {"items": 1})
    before = listing(out)
    real = pq.write_table

    def written_then_interrupted(table, where, *a, **k):
        real(table, where, *a, **k)
        assert Path(where).stat().st_size > 0  # the temp file is there and whole
        raise KeyboardInterrupt

    monkeypatch.setattr(pq, "write_table", written_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        output.write(out, [{"layer": 9, "head": 9, "score": 2.0}], [], {"items": 2})
    assert listing(out) == before  # old results intact, no temp file left behind


def _argv_for(command: str, tmp_path: Path, model: Path) -> tuple[list, Path]:
    """A command line that writes into ``tmp_path / 'out'`` (the folder compared before and after)."""
    out = tmp_path / "out"
    out.mkdir()
    repo = Path(__file__).resolve().parents[1]
    if command in ("align", "align (translations)"):
        for ext in ("src", "tgt"):
            (tmp_path / f"a.{ext}").write_text("the cat\n")
        src, tgt = tmp_path / "a.src", tmp_path / "a.tgt"
        # without --tgt: the model's own translations, a.out.translations.txt beside a.out
        given = ["--tgt", tgt] if command == "align" else ["--generate", "3", "--no-progress"]
        return ["align", repo / "models" / "translation.onnx", "--src", src, *given, "--out", out / "a.out"], out
    if command == "corpus":
        (tmp_path / "t.txt").write_text("the cat\nthe dog\n")
        return ["corpus", model, "--texts", tmp_path / "t.txt", "--out", out, "--no-progress", "--workers", "1"], out
    if command == "figure":
        return ["figure", model, "--text", "the cat", "--view", "heatmap", "--out", out / "f.png"], out
    return ["extract", model, "--text", "the cat", "--out", out / "m.npz"], out


@pytest.mark.parametrize("command", ["extract", "align", "align (translations)", "figure", "corpus"])
def test_a_rerun_interrupted_mid_write_keeps_the_previous_outputs(model, tmp_path, capsys, monkeypatch, command):
    """The first run's outputs; a second run interrupted after each temp file is written, before its rename:
    every earlier output byte for byte, and no temp file left."""
    argv, out = _argv_for(command, tmp_path, model)
    assert main([str(a) for a in argv]) == 0, capsys.readouterr().err
    before = listing(out)
    assert before
    written: list[str] = []

    def interrupted(src, dst):
        assert Path(src).stat().st_size > 0  # the temp file is whole: the interrupt comes at the last step
        written.append(Path(dst).name)
        raise KeyboardInterrupt

    monkeypatch.setattr(writes.os, "replace", interrupted)
    assert main([str(a) for a in argv]) == 130
    assert written and listing(out) == before


def test_the_guard_checks_late_writes_too(tmp_path):
    """Outputs named only mid-run (checkpoints, --all-heads figures) meet the same rule when they are written."""
    inp = tmp_path / "in.txt"
    inp.write_text("mine")
    link = tmp_path / "late.txt"
    os.link(inp, link)
    with writes.command_scope():
        writes.guard({"the input": inp}, {})
        with pytest.raises(AttnvizError, match="destroy"):
            writes.atomic_write_bytes(link, b"theirs")
    assert inp.read_text() == "mine"
    writes.atomic_write_bytes(link, b"outside a command: free")  # the scope ended; nothing is declared


# --------------------------------------------------------------------------- one guard

# module -> why it may write without core.writes (each reviewed)
WRITES_ALLOWED = {
    "core/writes.py": "the guard itself",
    "core/io.py": "streams each map into the zip inside core.writes.atomic_path's temp file",
    "corpus/reduce.py": "np.savez into core.writes.atomic_path's temp file (a file object: savez adds .npz to names)",
    "corpus/output.py": "pq.write_table into core.writes.atomic_path's temp file",
    "corpus/tables.py": "pq.write_table into core.writes.atomic_path's temp file (compare, ablate)",
    "corpus/compare_run.py": "items.parquet: pq.write_table into core.writes.atomic_path's temp file",
    "corpus/compare_reduce.py": "the checkpoint: np.savez into core.writes.atomic_path's temp file (a file object)",
    "corpus/ablate_corpus.py": "the checkpoint: np.savez into core.writes.atomic_path's temp file (a file object)",
    "corpus/ablate_plan.py": "the corpus-mean rows: np.savez into memory (io.BytesIO) for the workers' setup",
    "corpus/align_audio.py": "heads.parquet: pq.write_table into core.writes.atomic_path's temp file",
    "corpus/ray_engine.py": "image bytes into a private TemporaryDirectory, decoded and deleted at once",
    "runtime/optgraph.py": "onnx.save of onnxruntime's optimised graph, renamed in place inside session._kept's "
    "core.writes.atomic_path temp file (its only caller)",
    "runtime/builders.py": "an image into a private mkstemp file the tokenizer-free builder reads and deletes",
    "training/export.py": "onnx.save into core.writes.atomic_path's temp file",
    "training/hf_export.py": "onnx.save / copies into a private staging folder published by core.writes.publish_folder",
    "training/hf_vlm.py": "onnx.save (metadata) into export-hf's private staging folder, published by core.writes.publish_folder",
    "training/commands/train.py": "the sample image into core.writes.atomic_path's temp file",
    "training/tasks/spoken_digits.py": "onnx.save of the exported folder's metadata into core.writes.atomic_path's temp file",
    "gui/export.py": "Qt paints into core.writes.atomic_path's temp file",
    "figures/render.py": "savefig into memory; core.writes.atomic_write_bytes writes the bytes",
}
WRITE_CALLS = re.compile(
    r"""open\([^)]*["'][wax]b?\+?["']|\.write_bytes\(|\.write_text\(|np\.savez|write_table\(|savefig\(|"""
    r"""onnx\.save\(|\.save\(tmp|np\.save\(|torch\.save\(|\.tofile\(|json\.dump\(|shutil\.copy|shutil\.move|"""
    r"""os\.replace\(|os\.rename\("""
)


def test_no_module_writes_around_the_guard():
    root = Path(__file__).resolve().parents[1] / "attnviz"
    offenders = {
        str(p.relative_to(root)): m.group(0)
        for p in sorted(root.rglob("*.py"))
        if (m := WRITE_CALLS.search(p.read_text(encoding="utf-8"))) and str(p.relative_to(root)) not in WRITES_ALLOWED
    }
    assert offenders == {}, "write through attnviz.core.writes (atomic_path / atomic_write_*) or review an allowance"
    unused = [m for m in WRITES_ALLOWED if not WRITE_CALLS.search((root / m).read_text(encoding="utf-8"))]
    assert unused == [], "allowances no module needs any more"
