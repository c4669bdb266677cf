"""Untrusted files: nothing read outside the model's folder, regular files only, raster images only,
hostile tokenizers, caps — each a one-line ``attnviz: error:``, exit 2, every input byte-identical after."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import tiny_text_model
from PIL import Image

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.core.untrusted import read_bytes
from attnviz.runtime import inputs as ip
from attnviz.runtime import open_model
from attnviz.runtime.raster import open_raster

ROOT = Path(__file__).resolve().parents[1]


def sha_all(*paths):
    return {str(p): hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths}


def one_line(err: str, *words):
    assert err.startswith("attnviz: error:"), err
    assert "\n" not in err.strip() and "Traceback" not in err, err
    for w in words:
        assert w.lower() in err.lower(), (w, err)


def weight_in_subgraph(src: Path, dst: Path, location: str, sparse: bool = False) -> np.ndarray:
    """tiny_text_model with its layer-0 query weight moved into an ``If`` branch as external data at ``location``."""
    m = onnx.load(str(src))
    w = next(t for t in m.graph.initializer if t.name == "Wq0")
    arr = numpy_helper.to_array(w)
    m.graph.initializer.remove(w)
    ext = onnx.TensorProto(name="Wq0_ext", data_type=TensorProto.FLOAT, dims=list(arr.shape))
    ext.data_location = TensorProto.EXTERNAL
    for k, v in {"location": location, "offset": "0", "length": str(arr.nbytes)}.items():
        ext.external_data.add(key=k, value=v)
    out = helper.make_tensor_value_info("Wq0_b", TensorProto.FLOAT, list(arr.shape))
    if sparse:
        sp = onnx.SparseTensorProto(
            values=ext, indices=numpy_helper.from_array(np.arange(arr.size, dtype=np.int64), "idx")
        )
        sp.dims.extend(arr.shape)
        then = helper.make_graph([helper.make_node("Identity", ["Wq0_ext"], ["Wq0_b"])], "then", [], [out])
        then.sparse_initializer.append(sp)
    else:
        then = helper.make_graph(
            [helper.make_node("Identity", ["Wq0_ext"], ["Wq0_b"])], "then", [], [out], initializer=[ext]
        )
    other = helper.make_graph(
        [helper.make_node("Identity", ["Wq0_zero"], ["Wq0_b"])],
        "else",
        [],
        [out],
        initializer=[numpy_helper.from_array(np.zeros_like(arr), "Wq0_zero")],
    )
    m.graph.initializer.append(numpy_helper.from_array(np.array(True), "always"))
    m.graph.node.insert(0, helper.make_node("If", ["always"], ["Wq0"], then_branch=then, else_branch=other))
    onnx.save(m, str(dst))
    return arr


IDS = np.array([[1, 3, 4, 5, 6, 7, 2]], np.int64)


def test_subgraph_external_data_is_read_beside_the_model_never_from_the_cwd(tmp_path, monkeypatch):
    """Finding 1: a bare location in an If branch used to resolve against the working directory."""
    folder, cwd = tmp_path / "models" / "m", tmp_path / "cwd"
    folder.mkdir(parents=True)
    cwd.mkdir()
    src = tiny_text_model(tmp_path / "src.onnx")
    legit = weight_in_subgraph(src, folder / "model.onnx", "w.bin")
    (folder / "w.bin").write_bytes(legit.tobytes())
    secret = (np.arange(legit.size, dtype=np.float32) * 0.37).reshape(legit.shape)  # the "secret" the attacker wants
    (cwd / "w.bin").write_bytes(secret.tobytes())
    (folder.parent / "w.bin").write_bytes(secret.tobytes())
    monkeypatch.chdir(cwd)
    got = open_model(folder / "model.onnx", provider="cpu").run({"input_ids": IDS}, mode="dense").maps[0].array()
    want = open_model(src, provider="cpu").run({"input_ids": IDS}, mode="dense").maps[0].array()
    np.testing.assert_allclose(got, want, atol=1e-6)  # the model folder's bytes, not the secret's


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("where", ["cwd", "parent"])
def test_secret_outside_the_folder_never_reaches_the_maps(tmp_path, monkeypatch, capsys, where, sparse):
    folder, cwd = tmp_path / "models" / "m", tmp_path / "cwd"
    folder.mkdir(parents=True)
    cwd.mkdir()
    src = tiny_text_model(tmp_path / "src.onnx")
    location = "secret.bin" if where == "cwd" else "../secret.bin"
    legit = weight_in_subgraph(src, folder / "model.onnx", location, sparse=sparse)
    for d in (cwd, folder.parent):
        (d / "secret.bin").write_bytes((np.ones_like(legit) * 7).tobytes())
    monkeypatch.chdir(cwd)
    before = sha_all(folder / "model.onnx", cwd / "secret.bin", folder.parent / "secret.bin")
    rc = main(["extract", str(folder / "model.onnx"), "--text", "the cat sat", "--out", str(cwd / "out.npz")])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    one_line(err, "secret.bin")
    assert ("leaves the model's folder" in err) if where == "parent" else ("missing" in err)
    assert not (cwd / "out.npz").exists()
    assert sha_all(*before) == before


def test_fifo_tokenizer_does_not_block(tmp_path):
    """Finding 11: a FIFO named tokenizer.json beside the model used to block extract forever."""
    model = tiny_text_model(tmp_path / "model.onnx")
    os.mkfifo(tmp_path / "tokenizer.json")
    r = subprocess.run(
        [sys.executable, "-m", "attnviz", "extract", str(model), "--text", "the cat", "--out", str(tmp_path / "o.npz")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 2
    one_line(r.stderr, "tokenizer.json", "not a regular file")


def test_fifo_everywhere_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for fn in (
        lambda: read_bytes(fifo, "inputs"),
        lambda: ip.load_feeds(fifo),
        lambda: open_raster(fifo),
        lambda: ip.HFTokenizer.from_file(fifo),
        lambda: open_model(fifo),
    ):
        with pytest.raises(AttnvizError, match="not a regular file"):
            fn()


def hostile_tokenizer() -> dict:
    """TemplateProcessing naming a special token it never defines: tokenizers panics (Rust) on encode."""
    return {
        "version": "1.0",
        "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "the": 1, "cat": 2}, "unk_token": "[UNK]"},
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[X]", "type_id": 0}}],
            "pair": [],
            "special_tokens": {},
        },
    }


def test_hostile_tokenizer_is_one_line(tmp_path):
    """Finding 7: the Rust panic used to print ~20 lines of traceback."""
    model = tiny_text_model(tmp_path / "model.onnx")
    tok = tmp_path / "tokenizer.json"
    tok.write_text(json.dumps(hostile_tokenizer()))
    before = sha_all(model, tok)
    r = subprocess.run(
        [sys.executable, "-m", "attnviz", "extract", str(model), "--text", "the cat", "--out", str(tmp_path / "o.npz")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 2
    one_line(r.stderr, "tokenizer", "[X]")
    assert sha_all(*before) == before


UNDEFINED = re.escape("cannot encode this text: its post_processor's template uses special token '[X]' that it")


def test_tokenizer_panic_at_encode_is_caught(tmp_path):
    """A panic the load-time check does not foresee still becomes an AttnvizError (PanicException is a BaseException)."""
    from tokenizers import Tokenizer

    tok = ip.HFTokenizer(Tokenizer.from_str(json.dumps(hostile_tokenizer())), "hostile")
    with pytest.raises(AttnvizError, match=UNDEFINED):
        tok.encode("the cat")
    with pytest.raises(AttnvizError, match=UNDEFINED):
        tok.encode_ids("the cat")  # a corpus's tokenising, without labels, is guarded the same


def eps_bytes() -> bytes:
    return (
        b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\n%%EndComments\n"
        b"/Times-Roman findfont 12 scalefont setfont 0 0 moveto (x) show\nshowpage\n%%EOF\n"
    )


def test_eps_named_png_never_reaches_ghostscript(tmp_path, monkeypatch):
    """Finding 5: Pillow would hand an EPS file named .png to Ghostscript."""
    from PIL import EpsImagePlugin

    calls = []
    monkeypatch.setattr(EpsImagePlugin, "Ghostscript", lambda *a, **k: calls.append(a))
    p = tmp_path / "photo.png"
    p.write_bytes(eps_bytes())
    with Image.open(p) as im:  # the hazard is real: plain Pillow identifies it as EPS
        assert im.format == "EPS"
    spec = ip.ImageSpec(8, 8, 3, [0.5] * 3, [0.5] * 3, "test")
    with pytest.raises(AttnvizError, match="not a PNG, JPEG"):
        ip.load_image(p, spec)
    assert calls == []


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "BMP", "TIFF", "WEBP", "GIF"])
def test_every_raster_format_opens(tmp_path, fmt):
    a = np.zeros((6, 10, 3), np.uint8)
    a[:, :5] = 255
    p = tmp_path / f"im.{fmt.lower()}"
    Image.fromarray(a).save(p, format=fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    with open_raster(p) as im:
        assert im.size == (10, 6) and im.format == fmt


def test_gif_first_frame(tmp_path):
    frames = [Image.new("RGB", (4, 4), c) for c in ((255, 0, 0), (0, 0, 255))]
    p = tmp_path / "anim.gif"
    frames[0].save(p, save_all=True, append_images=frames[1:])
    _x, shown = ip.load_image(p, ip.ImageSpec(4, 4, 3, [0.0] * 3, [1.0] * 3, "test"))
    assert tuple(shown[0, 0]) == (255, 0, 0)


def test_pixel_cap_and_the_setting_that_raises_it(tmp_path, monkeypatch):
    p = tmp_path / "big.png"
    Image.new("L", (60, 50)).save(p)
    monkeypatch.setenv("ATTNVIZ_MAX_PIXELS", "2999")
    with pytest.raises(AttnvizError, match="ATTNVIZ_MAX_PIXELS") as e:
        open_raster(p)
    assert "3,000 pixels" in str(e.value)
    monkeypatch.setenv("ATTNVIZ_MAX_PIXELS", "3000")
    with open_raster(p) as im:
        assert im.size == (60, 50)


def test_decompression_bomb_is_a_message(tmp_path):
    p = tmp_path / "bomb.png"
    Image.new("1", (20000, 10000)).save(p)  # 200 Mpx in a few kB
    assert p.stat().st_size < 100_000
    with pytest.raises(AttnvizError, match="pixels"):
        open_raster(p)


@pytest.mark.parametrize("std", [[0.0, 0.5, 0.5], [float("nan")] * 3])
def test_zero_or_nan_std_refused(tmp_path, std):
    p = tmp_path / "im.png"
    Image.new("RGB", (4, 4)).save(p)
    with pytest.raises(AttnvizError, match="std"):
        ip.load_image(p, ip.ImageSpec(4, 4, 3, [0.5] * 3, std, "test"))


@pytest.mark.parametrize(
    "name, data",
    [
        ("notes.npz", b"hello\n"),  # a text file named .npz
        ("empty.npz", b""),
        ("one.npy", b"\x93NUMPY\x01\x00v\x00{'descr': '<f8', 'fortran_order': False, 'shape': (0,), }" + b" " * 45),
    ],
)
def test_maps_that_are_not_a_zip_archive_say_so(tmp_path, capsys, name, data):
    """``--maps`` on a file that is no .npz at all: np.load takes it for a pickle (or an .npy) and its own message,
    "This file contains pickled (object) data...", told the user nothing; the line says what the file is not."""
    maps = tmp_path / name
    maps.write_bytes(data)
    assert main(["figure", "--maps", str(maps), "--view", "heatmap", "--out", str(tmp_path / "f.pdf")]) == 2
    err = capsys.readouterr().err
    one_line(err, name, "not a .npz file", "attnviz extract")
    assert "pickled" not in err and not (tmp_path / "f.pdf").exists() and maps.read_bytes() == data


def _safetensors_bytes() -> bytes:
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    return len(header).to_bytes(8, "little") + header + b"\0" * 4  # the format's layout, written by hand


def test_a_hugging_face_download_given_as_the_model_says_to_export_it(tmp_path, capsys):
    """A newcomer's first try: the Hub folder (config.json + weights) or its weights file where the ONNX export
    goes.  It was "no .onnx file in this folder" and, for the weights, "not a readable ONNX model (Wire format was
    corrupt) ... re-export it" (nothing was exported yet); the line names export-hf."""
    folder = tmp_path / "bert"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bert"}')
    weights = folder / "model.safetensors"
    weights.write_bytes(_safetensors_bytes())
    before = sha_all(folder / "config.json", weights)
    for given, words in ((folder, ("Hugging Face model folder", f"attnviz export-hf {folder} --out DIR")),
                         (weights, ("safetensors weights", "attnviz export-hf FOLDER --out DIR"))):  # fmt: skip
        assert main(["extract", str(given), "--text", "the cat", "--out", str(tmp_path / "m.npz")]) == 2
        one_line(capsys.readouterr().err, *words)
    assert sha_all(folder / "config.json", weights) == before and not (tmp_path / "m.npz").exists()


@pytest.mark.parametrize(
    "series, words",
    [
        ("1 2 3 abc", ["'abc' is not a number", "numbers separated by spaces or commas"]),
        ("1,2;3", ["'2;3' is not a number"]),
        ("1 2 nan 4", ["series value nan", "give a measured value in its place"]),  # not "give smaller numbers"
        ("1e308 2", ["series value 1e+308", "give smaller numbers"]),
    ],
)
def test_a_series_that_is_not_numbers_names_the_word(tmp_path, capsys, series, words):
    """A forecaster's --text: the line named no word ("give numbers") and told a NaN to be smaller."""
    model = ROOT / "models" / "forecasting.onnx"
    assert main(["extract", str(model), "--text", series, "--out", str(tmp_path / "m.npz")]) == 2
    one_line(capsys.readouterr().err, *words)
    assert not (tmp_path / "m.npz").exists()


@pytest.mark.parametrize("name", ["bert-base-uncased", "google-bert/bert-base-uncased"])
def test_a_hub_model_name_says_attnviz_opens_local_files_and_how_to_get_one(tmp_path, monkeypatch, capsys, name):
    """`attnviz open bert-base-uncased` (a researcher's first guess) was "no such file"; the line says attnviz
    reads local ONNX files and how to download and export that model.  A missing .onnx path stays "no such file"."""
    monkeypatch.chdir(tmp_path)
    for argv in (["inspect", name], ["extract", name, "--text", "hi", "--out", "m.npz"]):
        assert main(argv) == 2
        one_line(capsys.readouterr().err, "opens local ONNX files", f"huggingface-cli download {name} --local-dir DIR",
                 "attnviz export-hf DIR")  # fmt: skip
    assert main(["inspect", "gone.onnx"]) == 2
    err = capsys.readouterr().err
    one_line(err, "gone.onnx: no such file")
    assert "huggingface" not in err
