"""Issue 24, the last item-6/7 edge cases: each is one ``attnviz: error:`` line, exit 2, nothing written.

A graph output listed twice or a tensor defined twice (onnxruntime ran both and exit was 0), an attention op
declaring 0 heads (onnxruntime's C++ condition reached the user), external-data fields that are not what they
claim (a NUL byte or a 5,000-character location was an internal error; a NUL in an offset was blamed on a
truncated file), negative token ids (Gather wraps them to the end of the vocabulary: exit 0 with wrong maps),
special-token ids past the vocabulary, and an ``--out`` on a read-only disk (corpus failed as an internal error).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_run import bounded, run_cli_forked
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import tiny_text_model
from test_hostile_fused_nan import mha_model

REPO = Path(__file__).resolve().parents[1]
TEXT = "the cat"


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def edited(tmp: Path, edit: Callable[[onnx.ModelProto], None]) -> Path:
    p = tiny_text_model(tmp / "model.onnx")
    m = onnx.load(str(p))
    edit(m)
    onnx.save(m, str(p))
    return p


def extract(model: Path, tmp: Path) -> list:
    return ["extract", model, "--text", TEXT, "--out", tmp / "o.npz"]


def duplicated_output(tmp: Path) -> list:
    return extract(edited(tmp, lambda m: m.graph.output.append(m.graph.output[0])), tmp)


def defined_twice(tmp: Path) -> list:
    def edit(m):
        first = m.graph.node[0].output[0]
        m.graph.node.append(helper.make_node("Identity", [m.graph.input[0].name], [first]))

    return extract(edited(tmp, edit), tmp)


def zero_heads(tmp: Path) -> list:
    np.savez(tmp / "x.npz", x=np.ones((1, 4, 8), np.float32))
    return ["extract", mha_model(tmp / "mha.onnx", 0.5, heads=0), "--inputs", tmp / "x.npz", "--out", tmp / "o.npz"]


def external(tmp: Path, where: str, **fields: str) -> list:
    """The layer-0 query weight moved to ``w.bin`` beside the model, as an initializer or a ``Constant``, with
    its external-data fields replaced by ``fields``."""

    def edit(m):
        w = next(t for t in m.graph.initializer if t.name == "Wq0")
        arr = numpy_helper.to_array(w)
        (tmp / "w.bin").write_bytes(arr.tobytes())
        m.graph.initializer.remove(w)
        t = onnx.TensorProto(name="Wq0", data_type=TensorProto.FLOAT, dims=list(arr.shape))
        t.data_location = TensorProto.EXTERNAL
        for k, v in {"location": "w.bin", "offset": "0", "length": str(arr.nbytes), **fields}.items():
            t.external_data.add(key=k, value=v)
        if where == "initializer":
            m.graph.initializer.append(t)
        else:
            m.graph.node.insert(0, helper.make_node("Constant", [], ["Wq0"], value=t))

    return extract(edited(tmp, edit), tmp)


def feeds(tmp: Path, ids) -> list:
    np.savez(tmp / "feeds.npz", input_ids=ids)
    return ["extract", tiny_text_model(tmp / "model.onnx"), "--inputs", tmp / "feeds.npz", "--out", tmp / "o.npz"]


def special(tmp: Path, **ids: int) -> list:
    def edit(m):
        for p in m.metadata_props:
            if p.key == "attnviz.special":
                p.value = json.dumps({"bos": 1, "eos": 2, "pad": 0, **ids})

    return extract(edited(tmp, edit), tmp)


# (case id) -> (build the inputs in a folder and return argv, words the one line must hold)
CASES: dict[str, tuple[Callable[[Path], list], tuple[str, ...]]] = {
    "graph output listed twice": (duplicated_output, ("graph output 'logits' is listed twice",)),
    "tensor defined twice": (defined_twice, ("defined twice",)),
    "attention op with 0 heads": (zero_heads, ("num_heads=0", "declares 0 heads", "re-export")),
    # (onnx's own words were "offset (100000) exceeds file size"; the size check names the file and the fix)
    "Constant offset past the end": (lambda t: external(t, "constant", offset="100000"), ("from byte 100,000",)),
    **{
        f"{where} {name}": (lambda t, w=where, f=fields: external(t, w, **f), words)
        for where in ("initializer", "constant")
        for name, fields, words in (
            ("offset with a NUL byte", {"offset": "0\x00junk"}, ("offset", "not a byte count")),
            ("negative offset", {"offset": "-64"}, ("offset '-64'", "not a byte count")),
            ("location with a NUL byte", {"location": "w.bin\x00../../x"}, ("NUL", "re-export")),
            ("5,000-character location", {"location": "a" * 5000}, ("5,000 characters", "re-export")),
        )
    },
    "negative token id": (lambda t: feeds(t, np.array([[1, -5, 2]], np.int64)), ("token id -5", "ids 0 to 11")),
    "token id past the vocabulary": (lambda t: feeds(t, np.array([[1, 12, 2]], np.int64)), ("token id 12",)),
    "token ids as text": (lambda t: feeds(t, np.array([["1", "2"]])), ("input_ids", "numeric")),
    "special id 10^30": (lambda t: special(t, eos=10**30), ("attnviz.special", "eos")),
}


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> dict:
    """Every case, built in a folder of its own and run there in a process of its own (forked from one interpreter
    that imported attnviz once: cli_run.run_cli_forked): case -> (the folder, its listing before, the result)."""
    root = tmp_path_factory.mktemp("hostile-edges")
    built = {}
    for i, (case, (build, _)) in enumerate(CASES.items()):
        folder = root / f"c{i}" / "case"
        folder.mkdir(parents=True)
        built[case] = (folder, build(folder))
    before = {case: listing(folder) for case, (folder, _) in built.items()}
    results = run_cli_forked(*((argv, folder) for folder, argv in built.values()))
    return {case: (folder, before[case], r) for (case, (folder, _)), r in zip(built.items(), results)}


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_edge_is_one_line_and_writes_nothing(ran, case):
    _, words = CASES[case]
    folder, before, result = ran[case]
    rc, err = bounded(result)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith("attnviz: error:") and "Traceback" not in err, err
    for w in words:
        assert w.lower() in lines[0].lower(), (w, lines[0])
    assert listing(folder) == before


def test_a_zero_pad_id_and_the_largest_id_are_ids_like_any_other(tmp_path):
    """The bounds are the vocabulary's own: pad = 0 and a token id of vocab-1 run (a bounded correct success)."""
    ids, pad = tmp_path / "ids", tmp_path / "pad"  # (each builds its own model.onnx)
    ids.mkdir()
    pad.mkdir()
    cases = [(special(pad, pad=0, eos=11), pad), (feeds(ids, np.array([[0, 11, 1]], np.int64)), ids)]
    for result in run_cli_forked(*cases):
        rc, err = bounded(result)
        assert rc == 0, err


@pytest.fixture
def read_only(tmp_path):
    """A folder nothing can be written into: a read-only tmpfs where this runs as root (permissions do not stop
    root), else a folder without write permission."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "none", str(folder)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {r.stderr.decode(errors='replace').strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_read_only_out_is_one_line_for_every_command_that_writes(tmp_path, read_only):
    model = tiny_text_model(tmp_path / "model.onnx")
    texts = tmp_path / "t.txt"
    texts.write_text("the cat\nthe dog ran\n")
    commands = {
        "extract": ["extract", model, "--text", TEXT, "--out", read_only / "m.npz"],
        "figure": ["figure", model, "--text", TEXT, "--view", "heatmap", "--out", read_only / "f.png"],
        "figure --all-heads": ["figure", model, "--text", TEXT, "--all-heads", "--out", read_only / "heads"],
        "corpus (new folder)": ["corpus", model, "--texts", texts, "--out", read_only / "c", "--no-progress"],
        "corpus (the folder)": ["corpus", model, "--texts", texts, "--out", read_only, "--no-progress"],
        "align": ["align", REPO / "models" / "translation.onnx", "--src", texts, "--tgt", texts],
        "testset": ["testset", "translation-synthetic", "--out", read_only / "ts"],
        "compare --texts": ["compare", model, model, "--texts", texts, "--out", read_only / "cmp", "--no-progress"],
        "ablate --texts": ["ablate", model, "--all-heads", "--texts", texts, "--out", read_only / "abl"],
    }
    commands["align"] += ["--out", read_only / "a.json"]
    results = run_cli_forked(*(([*argv, "--max-memory", "4"], tmp_path) for argv in commands.values()))
    for name, result in zip(commands, results):
        rc, err = bounded(result)
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1, (name, err[-2000:])
        assert lines[0].startswith("attnviz: error:") and "--out" in lines[0], (name, lines[0])
        assert not any(read_only.iterdir()), name


def test_a_read_only_out_of_export_hf_is_one_line_before_the_export(tmp_path, read_only, capfd, monkeypatch):
    """export-hf stages the whole folder beside --out: a folder that cannot be written was an internal error,
    and only after the model was loaded and exported.  Run in this process (the descriptor's stderr read back):
    saving the folder imported torch and transformers here already, which a fresh interpreter paid for again."""
    pytest.importorskip("transformers")
    import hf_models

    from attnviz.cli import main

    src = hf_models.save_hf_folder("bert", tmp_path / "hf")
    monkeypatch.chdir(tmp_path)
    capfd.readouterr()
    rc = main(["export-hf", str(src), "--out", str(read_only / "onnx")])
    err = capfd.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err[-2000:]
    assert lines[0].startswith("attnviz: error: cannot write in") and "--out" in lines[0], lines[0]
    assert not any(read_only.iterdir())
