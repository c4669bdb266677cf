"""Bad input: one clear line on stderr, a non-zero exit, and the user's model file unchanged."""

import hashlib
import shutil

import numpy as np
import onnx
import pytest
from onnx_builders import no_attention_model, tiny_text_model

from attnviz.cli import main


def sha(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture()
def tiny(tmp_path):
    return tiny_text_model(tmp_path / "tiny.onnx")


def run_cli(capsys, *argv):
    rc = main(list(map(str, argv)))
    err = capsys.readouterr().err.strip()
    return rc, err


def one_line_error(err, *words):
    assert err.startswith("attnviz: error:"), err
    assert "\n" not in err and "Traceback" not in err, err
    for w in words:
        assert w.lower() in err.lower(), (w, err)


def test_missing_file(tmp_path, capsys):
    rc, err = run_cli(capsys, "inspect", tmp_path / "nope.onnx")
    assert rc == 2
    one_line_error(err, "no such file")


def test_not_onnx(tmp_path, capsys):
    for name, data in [
        ("notes.onnx", b"hello, this is text\n" * 20),
        ("image.onnx", b"\x89PNG\r\n\x1a\n" + b"0" * 50),
        ("random.onnx", np.random.default_rng(0).bytes(4096)),
    ]:
        p = tmp_path / name
        p.write_bytes(data)
        before = sha(p)
        rc, err = run_cli(capsys, "inspect", p)
        assert rc == 2, name
        one_line_error(err, "onnx")
        assert sha(p) == before


def test_truncated_and_empty(tiny, tmp_path, capsys):
    data = tiny.read_bytes()
    for cut in (0, len(data) // 3, len(data) - 7):
        p = tmp_path / f"cut{cut}.onnx"
        p.write_bytes(data[:cut])
        rc, err = run_cli(capsys, "extract", p, "--text", "the cat", "--out", tmp_path / "o.npz")
        assert rc == 2, cut
        one_line_error(err)
        assert any(w in err for w in ("truncated", "corrupt", "empty")), err
        assert not (tmp_path / "o.npz").exists()


def test_no_attention(tmp_path, capsys):
    p = no_attention_model(tmp_path / "linear.onnx")
    rc, err = run_cli(
        capsys, "extract", p, "--inputs", _npz(tmp_path, x=np.ones((1, 4), np.float32)), "--out", tmp_path / "o.npz"
    )
    assert rc == 2
    one_line_error(err, "no attention", "softmax")
    rc = main(["inspect", str(p)])
    assert rc == 1
    assert "none" in capsys.readouterr().out


def test_external_data_outside_folder(tiny, tmp_path, capsys):
    m = onnx.load(str(tiny))
    folder = tmp_path / "model"
    folder.mkdir()
    onnx.save(m, str(folder / "ext.onnx"), save_as_external_data=True, location="ext.data", size_threshold=0)
    (folder / "ext.data").rename(tmp_path / "secret.bin")
    # onnx refuses to write '..' itself: point the locations outside by editing the proto, as a hostile file would
    m2 = onnx.load(str(folder / "ext.onnx"), load_external_data=False)
    for t in m2.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "../secret.bin"
    (folder / "ext.onnx").write_bytes(m2.SerializeToString())
    before = sha(folder / "ext.onnx")
    rc, err = run_cli(capsys, "inspect", folder / "ext.onnx")
    assert rc == 2
    one_line_error(err, "leaves the model's folder")
    assert sha(folder / "ext.onnx") == before


def test_external_data_inside_folder_works(tiny, tmp_path, capsys):
    m = onnx.load(str(tiny))
    sub = tmp_path / "ext"
    sub.mkdir()
    onnx.save(m, str(sub / "ext.onnx"), save_as_external_data=True, location="ext.data", size_threshold=0)
    assert main(["inspect", str(sub / "ext.onnx")]) == 0
    for model, out in ((tiny, "a.npz"), (sub / "ext.onnx", "b.npz")):
        assert main(["extract", str(model), "--text", "the cat sat", "--out", str(tmp_path / out)]) == 0
    a, b = np.load(tmp_path / "a.npz"), np.load(tmp_path / "b.npz")
    np.testing.assert_array_equal(a["attn_001"], b["attn_001"])
    # a truncated data file is a clear error, not a crash
    data = (sub / "ext.data").read_bytes()
    (sub / "ext.data").write_bytes(data[: len(data) // 2])
    rc, err = run_cli(capsys, "extract", sub / "ext.onnx", "--text", "the cat", "--out", tmp_path / "c.npz")
    assert rc == 2
    one_line_error(err)


def _npz(tmp_path, **arrays):
    p = tmp_path / "feeds.npz"
    np.savez(p, **arrays)
    return p


def test_missing_unknown_and_mistyped_inputs(tiny, tmp_path, capsys):
    out = tmp_path / "o.npz"
    rc, err = run_cli(
        capsys, "extract", tiny, "--inputs", _npz(tmp_path, other=np.ones((1, 3), np.int64)), "--out", out
    )
    one_line_error(err, "unknown input 'other'", "input_ids")
    np.savez(tmp_path / "empty.npz")
    rc, err = run_cli(capsys, "extract", tiny, "--inputs", tmp_path / "empty.npz", "--out", out)
    one_line_error(err, "missing input 'input_ids'")
    rc, err = run_cli(capsys, "extract", tiny, "--inputs", _npz(tmp_path, input_ids=np.full((1, 3), 0.5)), "--out", out)
    one_line_error(err, "takes whole numbers", "with fractions", "save whole numbers")
    rc, err = run_cli(
        capsys, "extract", tiny, "--inputs", _npz(tmp_path, input_ids=np.ones((3,), np.int64)), "--out", out
    )
    one_line_error(err, "rank 2")
    rc, err = run_cli(capsys, "extract", tiny, "--inputs", _npz(tmp_path, input_ids=np.array([[1, 99]])), "--out", out)
    one_line_error(err, "token id 99", "out of range", "12 entries")
    assert rc == 2 and not out.exists()
    # integral floats are accepted and cast
    assert (
        main(
            [
                "extract",
                str(tiny),
                "--inputs",
                str(_npz(tmp_path, input_ids=np.array([[1.0, 3.0, 4.0]]))),
                "--out",
                str(out),
            ]
        )
        == 0
    )


def test_unknown_tokens(tiny, tmp_path, capsys):
    rc, err = run_cli(capsys, "extract", tiny, "--text", "the zebra sat", "--out", tmp_path / "o.npz")
    assert rc == 2
    one_line_error(err, "unknown token 'zebra'")


def test_bad_tokenizer_and_image(tiny, tmp_path, capsys):
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    rc, err = run_cli(capsys, "extract", tiny, "--text", "the cat", "--tokenizer", bad, "--out", tmp_path / "o.npz")
    one_line_error(err, "tokenizer")
    rc, err = run_cli(capsys, "extract", tiny, "--image", tmp_path / "x.png", "--out", tmp_path / "o.npz")
    one_line_error(err, "takes no image")


def test_no_input_and_bad_out(tiny, tmp_path, capsys):
    rc, err = run_cli(capsys, "extract", tiny, "--out", tmp_path / "o.npz")
    one_line_error(err, "no input")
    rc, err = run_cli(capsys, "extract", tiny, "--text", "the cat", "--out", tmp_path / "missing_dir" / "o.npz")
    one_line_error(err, "does not exist")
    rc, err = run_cli(capsys, "extract", tiny, "--text", "the cat", "--out", tmp_path / "o.txt")
    one_line_error(err, ".npz")


def test_model_unchanged_after_every_command(tiny, tmp_path, capsys):
    copy = tmp_path / "copy.onnx"
    shutil.copy(tiny, copy)
    before = sha(copy)
    assert main(["inspect", str(copy)]) == 0
    assert main(["inspect", str(copy), "--json"]) == 0
    assert main(["extract", str(copy), "--text", "the cat sat", "--out", str(tmp_path / "o.npz")]) == 0
    assert (
        main(["extract", str(copy), "--text", "the cat sat", "--mode", "ondemand", "--out", str(tmp_path / "o2.npz")])
        == 0
    )
    assert sha(copy) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.onnx", "o.npz", "o2.npz", "tiny.onnx"]
