"""Done-means corpus (issue 9): every class of bad input, through the CLI and (offscreen) the window.

Each CLI case asserts exit code 2, ``attnviz: error: ...`` on one line, no traceback, and the sha256 of every
input file before and after.  The bounded fuzz test mutates small models built here (fixed seed) and asserts
the same promise for every mutant: exit 0 or 2, never an internal error, a crash, or a touched input.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import tiny_text_model
from test_hostile_crash import sigfpe_model
from test_hostile_inputs import eps_bytes, hostile_tokenizer, weight_in_subgraph

from attnviz.cli import main


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "<not a file>"


def run_case(capsys, argv, inputs):
    before = {str(p): sha(Path(p)) for p in inputs}
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    after = {str(p): sha(Path(p)) for p in inputs}
    return rc, out, err.strip(), before == after


# -- the corpus: name -> builder(tmp) returning (argv, input files, words the message must contain) ----------------
def _tiny(t):
    return tiny_text_model(t / "model.onnx")


def _feeds(t, **arrays):
    p = t / "feeds.npz"
    np.savez(p, **arrays)
    return p


def c_not_onnx(t):
    p = t / "notes.onnx"
    p.write_text("hello")
    return ["inspect", p], [p], ["ONNX model"]


def c_truncated(t):
    m = _tiny(t)
    p = t / "cut.onnx"
    p.write_bytes(m.read_bytes()[:300])
    return ["extract", p, "--text", "the cat", "--out", t / "o.npz"], [p], ["onnx"]


def c_folder(t):
    (t / "dir.onnx").mkdir()
    return ["inspect", t / "dir.onnx"], [], ["folder"]


def c_fifo_model(t):
    os.mkfifo(t / "pipe.onnx")
    return ["inspect", t / "pipe.onnx"], [], ["not a regular file"]


def c_external_escape(t):
    m = onnx.load(str(_tiny(t)))
    w = next(x for x in m.graph.initializer if x.name == "emb")
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("raw_data")
    w.external_data.add(key="location", value="../../etc/passwd")
    p = t / "escape.onnx"
    onnx.save(m, str(p))
    return ["extract", p, "--text", "the cat", "--out", t / "o.npz"], [p], ["leaves the model's folder"]


def c_subgraph_secret(t):
    (t / "m").mkdir()
    weight_in_subgraph(_tiny(t), t / "m" / "model.onnx", "../secret.bin")
    (t / "secret.bin").write_bytes(b"\0" * 256)
    return (
        ["extract", t / "m" / "model.onnx", "--text", "the cat", "--out", t / "o.npz"],
        [t / "m" / "model.onnx", t / "secret.bin"],
        ["secret.bin"],
    )


def c_sigfpe(t):
    m = sigfpe_model(t / "fpe.onnx")
    f = _feeds(t, q=np.ones((1, 2, 4), np.float32))
    return ["extract", m, "--inputs", f, "--out", t / "o.npz"], [m, f], ["crashed onnxruntime"]


def c_ort_refuses(t):
    m = onnx.load(str(_tiny(t)))
    m.graph.node[0].op_type = "NoSuchOp"
    p = t / "unknown_op.onnx"
    onnx.save(m, str(p))
    return ["extract", p, "--text", "the cat", "--out", t / "o.npz"], [p], ["onnxruntime"]


def c_eps_png(t):
    m = _tiny(t)
    img = t / "x.png"
    img.write_bytes(eps_bytes())
    return ["figure", m, "--image", img, "--text", "the cat", "--out", t / "f.png"], [m, img], ["image"]


def c_hostile_tokenizer(t):
    m = _tiny(t)
    tok = t / "tok.json"
    tok.write_text(json.dumps(hostile_tokenizer()))
    return ["extract", m, "--tokenizer", tok, "--text", "the cat", "--out", t / "o.npz"], [m, tok], ["tokenizer"]


def c_fifo_tokenizer(t):
    m = _tiny(t)
    os.mkfifo(t / "tokenizer.json")
    return ["extract", m, "--text", "the cat", "--out", t / "o.npz"], [m], ["not a regular file"]


def c_bad_maps(t):
    p = t / "maps.npz"
    np.savez(p, sites=np.array("[{]"), attn_000=np.zeros((2, 2)))
    return ["figure", "--maps", p, "--out", t / "f.png"], [p], ["npz"]


def c_maps_wrong_rank(t):
    p = t / "maps.npz"
    np.savez(
        p,
        sites=np.array(
            json.dumps([{"stack": "encoder", "kind": "self", "layer": 0, "heads": 1, "node": "n", "method": "probs"}])
        ),
        attn_000=np.zeros((2, 2), np.float32),
    )
    return ["figure", "--maps", p, "--out", t / "f.png"], [p], ["attn_000"]


def c_recipe_out_is_model(t):
    m = _tiny(t)
    return ["figure", m, "--text", "the cat", "--out", t / "f.png", "--recipe-out", m], [m], ["--recipe-out"]


def c_extract_over_feeds(t):
    m = _tiny(t)
    f = _feeds(t, input_ids=np.array([[1, 3, 2]], np.int64))
    return ["extract", m, "--inputs", f, "--out", f], [m, f], ["--out"]


def c_uint64_wrap(t):
    m = _tiny(t)
    f = _feeds(t, input_ids=np.array([[1, 2**64 - 1, 2]], np.uint64))
    return ["extract", m, "--inputs", f, "--out", t / "o.npz"], [m, f], ["range"]


def c_string_feeds(t):
    m = _tiny(t)
    f = _feeds(t, input_ids=np.array([["1", "2"]]))
    return ["extract", m, "--inputs", f, "--out", t / "o.npz"], [m, f], ["numeric"]


def c_nan_feeds(t):
    m = sigfpe_model(t / "fpe.onnx")  # never run: the NaN check comes first
    f = _feeds(t, q=np.full((1, 2, 4), np.nan, np.float32))
    return ["extract", m, "--inputs", f, "--out", t / "o.npz"], [m, f], ["NaN"]


def c_nan_weights(t):
    """Finding 10: NaN weights gave all-NaN maps with exit 0."""
    m = onnx.load(str(_tiny(t)))
    w = next(x for x in m.graph.initializer if x.name == "Wq0")
    w.CopyFrom(numpy_helper.from_array(np.full(numpy_helper.to_array(w).shape, np.nan, np.float32), "Wq0"))
    p = t / "nan.onnx"
    onnx.save(m, str(p))
    return ["extract", p, "--text", "the cat", "--out", t / "o.npz"], [p], ["NaN"]


def c_generate_cap(t):
    m = tiny_text_model(t / "lm.onnx", classifier=False, causal=True)
    return (
        ["extract", m, "--text", "the cat", "--generate", "100000000", "--out", t / "o.npz"],
        [m],
        ["ATTNVIZ_MAX_GENERATE"],
    )


def c_token_cap(t):
    m = _tiny(t)
    return ["extract", m, "--text", " ".join(["cat"] * 20000), "--out", t / "o.npz"], [m], ["ATTNVIZ_MAX_TOKENS"]


def c_figure_size_cap(t):
    m = _tiny(t)
    return (
        ["figure", m, "--text", "the cat", "--width-in", "27", "--dpi", "2400", "--out", t / "f.png"],
        [m],
        ["ATTNVIZ_MAX_FIGURE_PIXELS"],
    )


def c_null_checkpoint(t):
    pytest.importorskip("torch")
    out = t / "run"
    out.mkdir()
    (out / "checkpoint.json").write_text("null")
    return (
        ["train", "toy-reverse", "--preset", "tiny", "--steps", "2", "--quiet", "--out", out],
        [out / "checkpoint.json"],
        ["corrupt"],
    )


CORPUS = {k[2:]: v for k, v in dict(globals()).items() if k.startswith("c_")}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_cli_corpus(name, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv, inputs, words = CORPUS[name](tmp_path)
    rc, _out, err, unchanged = run_case(capsys, argv, inputs)
    assert rc == 2, (name, rc, err)
    assert err.startswith("attnviz: error:") and "\n" not in err and "Traceback" not in err, (name, err)
    for w in words:
        assert w.lower() in err.lower(), (name, w, err)
    assert unchanged, name
    assert not (tmp_path / "o.npz").exists() and not (tmp_path / "f.png").exists()


def test_inspect_escapes_terminal_codes(tmp_path, capsys):
    """Finding 11: metadata and node names are printed without their escape codes."""
    m = onnx.load(str(tiny_text_model(tmp_path / "model.onnx")))
    m.metadata_props.add(key="evil", value="\x1b]0;pwned\x07\x1b[2J")
    m.graph.node[0].name = "embed\x1b[31m"
    p = tmp_path / "esc.onnx"
    onnx.save(m, str(p))
    assert main(["inspect", str(p)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b]0;pwned" in out  # shown, escaped


# -- bounded fuzz ----------------------------------------------------------------------------------------------------
def _mutants(seed_model: onnx.ModelProto, rng: np.random.Generator, n: int):
    """Structural mutations (attributes, shapes, op types, wiring, initializers) and raw byte damage."""
    data = seed_model.SerializeToString()
    ops = ["Softmax", "MatMul", "Transpose", "Reshape", "Attention", "Max", "Identity", "Gather", "Concat"]
    for k in range(n):
        kind = k % 6
        if kind == 0:  # flip bytes
            b = bytearray(data)
            for i in rng.integers(0, len(b), size=int(rng.integers(1, 8))):
                b[int(i)] = int(rng.integers(0, 256))
            yield f"bytes{k}", bytes(b)
            continue
        m = onnx.ModelProto()
        m.CopyFrom(seed_model)
        nodes = m.graph.node
        node = nodes[int(rng.integers(0, len(nodes)))]
        if kind == 1:  # op type swap
            node.op_type = ops[int(rng.integers(0, len(ops)))]
        elif kind == 2:  # attribute values
            for a in node.attribute:
                if a.type == onnx.AttributeProto.INT:
                    a.i = int(rng.choice([0, -1, -5, 7, 2**31]))
                elif a.type == onnx.AttributeProto.INTS:
                    a.ints[:] = [int(x) for x in rng.integers(-3, 5, size=len(a.ints))]
            node.attribute.append(helper.make_attribute("axis", int(rng.integers(-4, 4))))
        elif kind == 3:  # rewire an input to another tensor (may create a cycle)
            names = [o for n in nodes for o in n.output]
            if node.input:
                node.input[int(rng.integers(0, len(node.input)))] = names[int(rng.integers(0, len(names)))]
        elif kind == 4:  # damage an initializer's shape or values
            inits = m.graph.initializer
            t = inits[int(rng.integers(0, len(inits)))]
            a = numpy_helper.to_array(t)
            if rng.random() < 0.5 and a.size > 1:
                t.CopyFrom(numpy_helper.from_array(a.reshape(-1)[: max(1, a.size // 2)], t.name))
            else:
                t.CopyFrom(numpy_helper.from_array(np.full_like(a, np.nan if a.dtype.kind == "f" else -7), t.name))
        else:  # drop a node
            del nodes[int(rng.integers(0, len(nodes)))]
        yield f"{['', 'op', 'attr', 'wire', 'init', 'drop'][kind]}{k}", m.SerializeToString()


def test_bounded_fuzz(tmp_path, capsys):
    seed = onnx.load(str(tiny_text_model(tmp_path / "seed.onnx", layers=1)))
    rng = np.random.default_rng(9)
    t_end = time.monotonic() + 45  # the bound: whatever mutants fit in 45 s (all 150 usually do: ~15 s)
    seen = {0: 0, 2: 0}
    for name, data in _mutants(seed, rng, 150):
        if time.monotonic() > t_end:
            break
        p = tmp_path / f"{name}.onnx"
        p.write_bytes(data)
        rc, _out, err, unchanged = run_case(
            capsys, ["extract", p, "--text", "the cat sat", "--out", tmp_path / "o.npz"], [p]
        )
        assert rc in (0, 2), (name, rc, err)  # never an internal error (1) or a crash
        assert unchanged, name
        if rc == 2:
            assert err.startswith("attnviz: error:") and "\n" not in err and "Traceback" not in err, (name, err)
        seen[rc] += 1
    assert seen[2] >= 10 and sum(seen.values()) >= 30, seen  # the mutants did reach the error paths


def test_inspect_does_not_run_a_model_at_a_huge_declared_size(tmp_path, capsys, monkeypatch):
    """Finding 8: inspect's probe used the declared input size (a 5 kB file used 6.4 GB)."""
    from attnviz.runtime.model import AttentionModel

    m = onnx.load(str(tiny_text_model(tmp_path / "model.onnx")))
    dims = m.graph.input[0].type.tensor_type.shape.dim
    dims[0].dim_value, dims[1].dim_value = 1, 50_000_000
    p = tmp_path / "huge.onnx"
    onnx.save(m, str(p))
    runs = []
    real_run = AttentionModel.run
    monkeypatch.setattr(
        AttentionModel, "run", lambda self, feeds, mode="auto": runs.append(feeds) or real_run(self, feeds, mode)
    )
    assert main(["inspect", str(p)]) == 0
    assert runs == []  # not run at all: 50 M tokens is over the probe's size limit
    assert "attention sites (2)" in capsys.readouterr().out
    dims[1].dim_value = 7  # a sane declared size is still probed
    onnx.save(m, str(p))
    assert main(["inspect", str(p)]) == 0 and len(runs) == 1


def test_extract_output_cap_before_materialising(tmp_path, capsys, monkeypatch):
    """Finding 8: on-demand extraction materialised every map; the size is now checked first (and maps stream)."""
    model = tiny_text_model(tmp_path / "model.onnx")
    monkeypatch.setenv("ATTNVIZ_MAX_OUTPUT_MB", "1")
    text = " ".join(["cat"] * 300)  # 2 layers × 2 heads × 302² × 4 B = 1.4 MB
    rc = main(["extract", str(model), "--text", text, "--memory", "ondemand", "--out", str(tmp_path / "o.npz")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "1.4 MB" in err and "ATTNVIZ_MAX_OUTPUT_MB=2" in err and "\n" not in err, err
    assert not (tmp_path / "o.npz").exists()
    monkeypatch.setenv("ATTNVIZ_MAX_OUTPUT_MB", "2")
    assert main(["extract", str(model), "--text", text, "--memory", "ondemand", "--out", str(tmp_path / "o.npz")]) == 0
    from attnviz.core.io import load_npz

    assert load_npz(tmp_path / "o.npz").maps[1].shape == (1, 2, 302, 302)
