"""Issue 24, items 6 and 7: hostile JSON, maps files, feeds and metadata are one-line refusals, never an internal
error or a silent wrong result.

Every case is generated here (no stored blobs) and run as ``python -m attnviz.cli`` runs it, in a process of its
own under a time cap (forked from one interpreter that imported attnviz once: tests/cli_run.py, run_cli_forked): it
must exit 2 with exactly one ``attnviz: error:`` line on stderr naming the problem, and leave the folder exactly as
it was (names and bytes).  JSON reaches attnviz through one guard (``core.untrusted.parse_json`` /
``read_json``: nesting depth, number length, size, UTF-8); maps files through ``core.io.load_npz``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_run import bounded, run_cli_forked
from onnx_builders import tiny_text_model

REPO = Path(__file__).resolve().parents[1]
DEEP = "[" * 100_000  # the RecursionError: json.loads recurses once per level
LONG_INT = "1" * 100_000  # past Python's 4,300-digit int limit: a ValueError today


def listing(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` with its bytes' digest (folders as 'dir'): what 'writes nothing' compares."""
    return {
        str(p.relative_to(folder)): ("dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(folder.rglob("*"))
    }


def tiny(tmp: Path, **meta: str) -> Path:
    """The tiny text model with some attnviz metadata replaced (``special='...'`` sets ``attnviz.special``)."""
    p = tiny_text_model(tmp / "model.onnx")
    if meta:
        m = onnx.load(str(p))
        keep = [(e.key, e.value) for e in m.metadata_props if e.key.removeprefix("attnviz.") not in meta]
        del m.metadata_props[:]
        for k, v in [*keep, *((f"attnviz.{k}", v) for k, v in meta.items())]:
            m.metadata_props.add(key=k, value=v)
        onnx.save(m, str(p))
    return p


def vit(tmp: Path, **image) -> tuple[Path, Path]:
    """The demo ViT in a folder of its own (its ``attnviz.image`` metadata updated by ``image``) and an image."""
    from PIL import Image

    folder = tmp / "m"
    folder.mkdir()
    model = folder / "vit.onnx"
    m = onnx.load(str(REPO / "models" / "vit-classification.onnx"))
    if image:
        e = next(e for e in m.metadata_props if e.key == "attnviz.image")
        e.value = json.dumps({**json.loads(e.value), **image})
    onnx.save(m, str(model))
    img = tmp / "img.png"
    Image.new("RGB", (32, 32), (200, 10, 10)).save(img)
    return model, img


def maps(tmp: Path, **change) -> Path:
    """A real maps file (extracted from the tiny model in-process) with some entries replaced."""
    from attnviz.core.io import load_npz, save_npz
    from attnviz.runtime import open_model

    src = tmp_model_dir(tmp) / "good.npz"
    if not src.exists():
        ids = np.array([[1, 3, 4, 5, 2]], np.int64)
        save_npz(open_model(tiny_text_model(src.parent / "t.onnx"), provider="cpu").run({"input_ids": ids}), src)
        load_npz(src)  # the unchanged file is a good one
    with np.load(src, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays.update({k: np.array(v) if isinstance(v, str) else v for k, v in change.items()})
    out = tmp / "maps.npz"
    np.savez(out, **arrays)
    return out


def tmp_model_dir(tmp: Path) -> Path:
    d = tmp.parent / (tmp.name + "-src")  # outside the compared folder
    d.mkdir(exist_ok=True)
    return d


def sites_with(**field) -> str:
    return json.dumps(
        [
            {"stack": "encoder", "kind": "self", "layer": i, "heads": 2, "node": f"n{i}", "method": "softmax", **field}
            for i in range(2)
        ]
    )


def recipe_text(tmp: Path, text: str) -> list:
    return recipe_bytes(tmp, text.encode())


def recipe_bytes(tmp: Path, data: bytes) -> list:
    (tmp / "r.json").write_bytes(data)
    return ["figure", "--recipe", tmp / "r.json"]


def jsonl(tmp: Path, line: str) -> list:
    (tmp / "t.jsonl").write_text('{"text": "the cat"}\n' + line + "\n")
    return ["corpus", tiny(tmp), "--texts", tmp / "t.jsonl", "--out", tmp / "out"]


def figure_maps(tmp: Path, **change) -> list:
    return ["figure", "--maps", maps(tmp, **change), "--view", "heatmap", "--out", tmp / "f.png"]


def extract_vit(tmp: Path, **image) -> list:
    model, img = vit(tmp, **image)
    return ["extract", model, "--image", img, "--out", tmp / "o.npz"]


def vit_preprocessor(tmp: Path, pre: str) -> list:
    """The ViT without its image metadata, so the folder's preprocessor_config.json says how to prepare images."""
    model, img = vit(tmp)
    m = onnx.load(str(model))
    keep = [(e.key, e.value) for e in m.metadata_props if e.key != "attnviz.image"]
    del m.metadata_props[:]
    for k, v in keep:
        m.metadata_props.add(key=k, value=v)
    onnx.save(m, str(model))
    (model.parent / "config.json").write_text('{"model_type": "vit"}')  # a folder's config files are read with one
    (model.parent / "preprocessor_config.json").write_text(pre)
    return ["extract", model, "--image", img, "--out", tmp / "o.npz"]


def extract_special(tmp: Path, **ids) -> list:
    model = tiny(tmp, special=json.dumps({"bos": 1, "eos": 2, "pad": 0, **ids}))
    return ["extract", model, "--text", "the cat", "--out", tmp / "o.npz"]


def extract_feeds(tmp: Path, **feeds) -> list:
    np.savez(tmp / "feeds.npz", **feeds)
    return ["extract", tiny(tmp), "--inputs", tmp / "feeds.npz", "--out", tmp / "o.npz"]


def nan_scale(tmp: Path) -> list:
    """The tiny model with its attention scale constant NaN: every score is NaN (drawn, the maps were all zero)."""
    from onnx import numpy_helper

    p = tiny(tmp)
    m = onnx.load(str(p))
    t = next(t for t in m.graph.initializer if t.name == "scale")
    t.CopyFrom(numpy_helper.from_array(np.array(np.nan, np.float32), "scale"))
    onnx.save(m, str(p))
    return ["figure", p, "--text", "the cat", "--view", "heatmap", "--out", tmp / "f.png"]


def empty_gold_align(tmp: Path) -> list:
    for name, text in (("src", "a b\nc d\n"), ("tgt", "x y\nz w\n"), ("gold", "\n\n")):
        (tmp / f"{name}.txt").write_text(text)
    return ["align", REPO / "models" / "translation.onnx", "--src", tmp / "src.txt", "--tgt", tmp / "tgt.txt",
            "--gold", tmp / "gold.txt", "--out", tmp / "a.txt"]  # fmt: skip


def empty_gold_corpus(tmp: Path) -> list:
    recs = [{"text": "a b", "en": "x y", "gold": ""}, {"text": "a b c", "en": "x y", "gold": ""}]
    (tmp / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return ["corpus", REPO / "models" / "translation.onnx", "--texts", tmp / "c.jsonl", "--text-pair-column", "en",
            "--gold-column", "gold", "--out", tmp / "o", "--no-progress"]  # fmt: skip


# (case id) -> (build the inputs in a folder and return argv, words the one line must hold)
CASES: dict[str, tuple[Callable[[Path], list], tuple[str, ...]]] = {
    # one JSON reader (item 6)
    "recipe nested": (lambda t: recipe_text(t, DEEP), ("recipe", "nested deeper than 100")),
    "recipe long number": (lambda t: recipe_text(t, '{"view": ' + LONG_INT + "}"), ("recipe", "digits")),
    "recipe not UTF-8": (lambda t: recipe_bytes(t, b'{"\xff": 1}'), ("recipe", "UTF-8")),
    "jsonl line nested": (lambda t: jsonl(t, '{"text": ' + DEEP), ("t.jsonl line 2", "nested")),
    "jsonl long int": (lambda t: jsonl(t, '{"text": "a", "n": ' + LONG_INT + "}"), ("t.jsonl line 2", "digits")),
    # Ray Data parses .jsonl with pyarrow: the same guard runs on each line first
    "jsonl line nested, ray": (
        lambda t: [*jsonl(t, '{"text": ' + DEEP), "--engine", "ray", "--no-progress"],
        ("t.jsonl line 2", "nested"),
    ),
    "jsonl long int, ray": (
        lambda t: [*jsonl(t, '{"text": "a", "n": ' + LONG_INT + "}"), "--engine", "ray", "--no-progress"],
        ("t.jsonl line 2", "digits"),
    ),
    "maps sites nested": (lambda t: figure_maps(t, sites=DEEP), ("maps.npz", "'sites'", "nested")),
    "maps info nested": (lambda t: figure_maps(t, info=DEEP), ("maps.npz", "'info'", "nested")),
    "maps info a list": (lambda t: figure_maps(t, info="[1, 2]"), ("maps.npz", "'info'", "list")),
    # maps files that used to be drawn wrong or crash (items 6, 7)
    "maps bad stack": (lambda t: figure_maps(t, sites=sites_with(stack="middle")), ("maps.npz", "stack")),
    "maps stack a list": (lambda t: figure_maps(t, sites=sites_with(stack=[])), ("maps.npz", "stack")),
    "maps 10^9 heads": (lambda t: figure_maps(t, sites=sites_with(heads=10**9)), ("1,000,000,000 heads", "holds 2")),
    "maps sites not a list": (lambda t: figure_maps(t, sites='{"a": 1}'), ("maps.npz", "'sites'")),
    "maps tokens 2-D": (lambda t: figure_maps(t, tokens=np.array([["a"] * 5])), ("tokens is [1, 5]",)),
    # image preprocessing from the model's metadata (item 6)
    "image size 0": (lambda t: extract_vit(t, size=[0, 0]), ("image size 0", "--image-size")),
    "image size negative": (lambda t: extract_vit(t, size=[-32, 32]), ("image size -32",)),
    "image size a string": (lambda t: extract_vit(t, size=["a", "b"]), ("image size a",)),
    "image size 10^9": (lambda t: extract_vit(t, size=[10**9, 10**9]), ("image size 1000000000",)),
    "image mean nested": (lambda t: extract_vit(t, mean=[[0.5], [0.5], [0.5]]), ("image mean", "--image-mean")),
    "image std a string": (lambda t: extract_vit(t, std="abc"), ("image std", "--image-std")),
    "preprocessor size 0": (
        lambda t: vit_preprocessor(t, '{"size": {"height": 0, "width": 0}}'),
        ("image size 0", "preprocessor_config.json"),
    ),
    "preprocessor mean nested": (
        lambda t: vit_preprocessor(t, '{"size": 32, "image_mean": [[0.5]], "image_std": [0.5]}'),
        ("image mean", "preprocessor_config.json"),
    ),
    # feeds files (item 6)
    "feeds NaN ids": (lambda t: extract_feeds(t, input_ids=np.array([[1.0, np.nan, 2.0]])), ("input_ids", "NaN")),
    "feeds records": (
        lambda t: extract_feeds(t, input_ids=np.zeros((1, 3), dtype=[("a", "i8"), ("b", "f4")])),
        ("input_ids holds records of named fields", "numeric array"),
    ),
    "feeds batch 0": (lambda t: extract_feeds(t, input_ids=np.zeros((0, 3), np.int64)), ("input_ids", "batch row")),
    # special-token ids in metadata (item 6): numpy overflowed on them, or an end of sequence never matched
    "special id 10^30": (lambda t: extract_special(t, bos=10**30), ("attnviz.special", "bos", "not a token id")),
    "special id negative": (lambda t: extract_special(t, pad=-7), ("attnviz.special", "pad = -7")),
    "special id a string": (lambda t: extract_special(t, eos="x"), ("attnviz.special", "eos = x")),
    # silent wrong results (item 7)
    "NaN attention scale": (nan_scale, ("NaN/Inf attention", "encoder self L0")),
    "align empty gold": (empty_gold_align, ("--gold gold.txt", "no sure link", "AER 1.000")),
    "corpus empty gold": (empty_gold_corpus, ("--gold-column gold", "no sure link")),
}


SIDECARS = ("config.json", "generation_config.json", "tokenizer_config.json", "preprocessor_config.json")
SIDECAR_CONTENTS = {"nested": DEEP, "long number": '{"model_max_length": ' + LONG_INT + "}", "not UTF-8": "\udcff"}


def sidecar(tmp: Path, name: str, content: str) -> list:
    model, img = vit(tmp)
    (model.parent / "config.json").write_text('{"model_type": "vit"}')  # the others are read beside a config.json
    (model.parent / name).write_text(content, errors="surrogateescape")  # the last: a byte that is not UTF-8
    return ["extract", model, "--image", img, "--out", tmp / "o.npz"]


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> dict:
    """Every command of the two tests below, each built in a folder of its own and run there, in a process of its
    own: (case) or (sidecar, content id) -> (the folder, its listing before the run, (exit code, stderr))."""
    root = tmp_path_factory.mktemp("hostile-json")
    built = {}
    for i, (case, (build, _)) in enumerate(CASES.items()):
        folder = root / f"c{i}" / "case"  # (maps() keeps its source beside it, outside the compared folder)
        folder.mkdir(parents=True)
        built[case] = (folder, build(folder))
    for i, (name, (cid, content)) in enumerate((n, c) for n in SIDECARS for c in SIDECAR_CONTENTS.items()):
        folder = root / f"s{i}"
        folder.mkdir()
        built[name, cid] = (folder, sidecar(folder, name, content))
    before = {key: listing(folder) for key, (folder, _) in built.items()}
    results = run_cli_forked(*((argv, folder) for folder, argv in built.values()))
    return {key: (folder, before[key], r) for (key, (folder, _)), r in zip(built.items(), results)}


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_input_is_one_line_and_writes_nothing(ran, case):
    _, words = CASES[case]
    folder, before, result = ran[case]
    rc, err = bounded(result)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith("attnviz: error:") and "Traceback" not in err, err
    for w in words:
        assert w.lower() in lines[0].lower(), (w, lines[0])
    assert listing(folder) == before


@pytest.mark.parametrize("name", SIDECARS)
@pytest.mark.parametrize("content", list(SIDECAR_CONTENTS))
def test_a_hostile_config_file_is_passed_over_as_a_missing_one(ran, name, content):
    """A model folder's config file that the JSON guard refuses counts as absent (as an unreadable one always
    did): the model runs as itself, in bounded time, and only --out is written.  These raised RecursionError or
    ValueError (exit 1) before."""
    folder, before, result = ran[name, content]
    rc, err = bounded(result)
    assert rc == 0, err
    assert "Traceback" not in err
    assert set(listing(folder)) - set(before) == {"o.npz"}


@pytest.mark.parametrize("axis, labels", [("tokens", ["a", "b", "c"]), ("key_tokens", ["x", "y"])])
def test_a_token_axis_that_fits_no_map_is_named_not_drawn(tmp_path, axis, labels):
    """Labels no map's axis has are not put on any map: the maps show positions and the run's notes say why (the
    file used to be drawn as if nothing were amiss).  Not a refusal: 'attnviz extract' itself writes such files
    for float inputs whose last axis is taken for tokens (tests/runtime/test_fidelity.py)."""
    from attnviz.core.io import load_npz

    r = load_npz(maps(tmp_path, **{axis: np.array(labels)}))
    assert r.tokens is None if axis == "tokens" else r.key_tokens is None
    assert [n for n in r.info["notes"] if n.startswith(f"{axis} ({len(labels)} labels) fit no map's axis")]
    q, k = r.blocks()[0].query_axis, r.blocks()[0].key_axis
    assert q.labels == k.labels == [str(i) for i in range(5)]  # the 5 positions of the 5-token maps
