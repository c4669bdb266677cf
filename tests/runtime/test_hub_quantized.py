"""Issue 22 item 3, the Hub's quantized decoders give maps: ``_q4`` (onnxruntime's MatMulNBitsQuantizer, 4 bits,
block 32: every weight MatMul becomes com.microsoft MatMulNBits), ``_q4f16`` (the same on the float16 file) and ``_fp16`` (onnxruntime's float16 converter
with keep_io_types: float32 at the inputs and outputs, float16 inside; Softmax in float16, or in float32 between
Casts when Softmax is on the op block list).  Both are made in the test from the tiny LLaVA's three files, with the
If-merged decoder converted branch by branch and merged again, as optimum converts before merging (the float16
converter cannot convert an If-merged file: onnxruntime refuses what it writes).

The reference is the quantized graph itself: its no-past decoder cut out of the If as a plain model, each Softmax's
probabilities (the tensor the P·V MatMul reads) made graph outputs by hand, run by plain onnxruntime on the feeds
the set gave its decoder."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

pytest.importorskip("torch")
pytest.importorskip("transformers")

import vlm_models as vm
from PIL import Image

from attnviz.cli import main
from attnviz.runtime import open_model, vlm
from attnviz.runtime.chain import resolve

PROMPT = "<s> <image> a photo of the cat"
FILES = ("vision_encoder", "embed_tokens", "decoder_model_merged")
VARIANTS = ("q4", "fp16", "fp16softmax32", "q4f16")  # fp16softmax32: Softmax in float32 between Casts (op_block_list)


def _split(merged: onnx.ModelProto) -> dict[str, onnx.ModelProto]:
    """The two branches of an If-merged decoder as plain models (the inverse of vlm_models.merge_decoders)."""
    g = merged.graph
    node = g.node[0]
    outer = {t.name: t for t in g.initializer}
    out = {}
    for a in node.attribute:
        reads = {i for n in a.g.node for i in n.input}
        inputs = [i for i in g.input if i.name in reads]
        inits = list(a.g.initializer) + [outer[n] for n in sorted(reads) if n in outer]
        body = helper.make_graph(list(a.g.node), a.name, inputs, list(g.output), initializer=inits)
        m = helper.make_model(body, opset_imports=merged.opset_import)
        m.ir_version = merged.ir_version
        out[a.name] = m
    return out


def _sorted(m: onnx.ModelProto) -> onnx.ModelProto:
    """Nodes in dependency order: the float16 converter appends its input Casts last, which an If body forbids."""
    have = {i.name for i in m.graph.input} | {t.name for t in m.graph.initializer} | {""}
    left, done = list(m.graph.node), []
    while left:
        ready = [n for n in left if all(i in have for i in n.input)]
        assert ready, "cycle"
        for n in ready:
            have.update(n.output)
        done += ready
        left = [n for n in left if all(n is not r for r in ready)]
    del m.graph.node[:]
    m.graph.node.extend(done)
    return m


def _quantize(src, dst, variant: str) -> None:
    if variant == "q4f16":  # the Hub's: float16 first, then 4-bit weights
        _quantize(src, dst, "fp16")
        src, variant = dst, "q4"
    model = onnx.load(str(src))
    if variant == "q4":
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        q = MatMulNBitsQuantizer(model, block_size=32, is_symmetric=True, bits=4)
        q.process()
        q.model.save_model_to_file(str(dst))
        return
    from onnxruntime.transformers.float16 import convert_float_to_float16

    kw = dict(keep_io_types=True, op_block_list=["Softmax"] if variant == "fp16softmax32" else None)
    if any(n.op_type == "If" for n in model.graph.node):
        parts = _split(model)
        half = {k: _sorted(convert_float_to_float16(v, **kw)) for k, v in parts.items()}
        vm.merge_decoders(half["else_branch"], half["then_branch"], dst)
    else:
        onnx.save(convert_float_to_float16(model, **kw), str(dst))


@pytest.fixture(scope="module")
def repo(llava_repo, tmp_path_factory):
    out = tmp_path_factory.mktemp("quantized") / "tiny-llava"
    shutil.copytree(llava_repo, out)
    for v in VARIANTS:
        for f in FILES:
            _quantize(out / "onnx" / f"{f}.onnx", out / "onnx" / f"{f}_{v}.onnx", v)
    return out


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    p = tmp_path_factory.mktemp("img") / "photo.png"
    Image.fromarray((np.random.default_rng(3).random((32, 32, 3)) * 255).astype(np.uint8)).save(p)
    return p


def _by_hand(decoder: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    """The no-past branch's probabilities, each Softmax's output followed through Casts to the P·V MatMul."""
    m = _split(decoder)["else_branch"]
    consumers: dict[str, list] = {}
    for n in m.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    probs = []
    for n in m.graph.node:
        if n.op_type == "Softmax":
            t = n.output[0]
            while [c.op_type for c in consumers[t]] == ["Cast"]:
                t = consumers[t][0].output[0]
            assert [c.op_type for c in consumers[t]] == ["MatMul"]
            probs.append(t)
    m.graph.output.extend(helper.make_empty_tensor_value_info(t) for t in probs)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    got = sess.run(probs, {k: v for k, v in feeds.items() if k in names})
    return [np.asarray(p) for p in got]


def _decoder_feeds(m, monkeypatch) -> dict:
    """The decoder's feeds of the next run, its embeddings spliced as the run spliced them (where the sessions run:
    the decoder is the last stage of one request, runtime/chain.py)."""
    seen: dict = {}
    run = vlm.run_stages

    def spy(runs):
        got = run(runs)
        seen.update(resolve(runs[-1].feeds, [dict(zip(p.fetch, v)) for p, v in zip(runs, got)]))
        return got

    monkeypatch.setattr(vlm, "run_stages", spy)
    return seen


@pytest.mark.parametrize("variant", VARIANTS)
def test_quantized_decoder_maps_are_the_graphs_own_probabilities(repo, image, variant, monkeypatch):
    full = open_model(repo, provider="cpu").analyze(text=PROMPT, image=str(image))
    m = open_model(repo, provider="cpu", variant=variant)
    feeds = _decoder_feeds(m, monkeypatch)
    r = m.analyze(text=PROMPT, image=str(image))
    assert [(s.stack, s.layer, s.method) for s in r.sites] == [(s.stack, s.layer, s.method) for s in full.sites]
    decoder = onnx.load(str(repo / "onnx" / f"decoder_model_merged_{variant}.onnx"))
    want = _by_hand(decoder, feeds)
    if "f16" in variant:
        assert {p.dtype for p in want} == {np.dtype(np.float16)}  # the graph's own probabilities are float16
    got = [mp.array() for mp, s in zip(r.maps, r.sites) if s.stack == "decoder"]
    assert len(got) == len(want) == vm.LAYERS
    for g, w in zip(got, want):
        assert g.dtype == np.float32 and np.isfinite(g).all()
        # the same numbers, as float32; float16 ones within one float16 step: onnxruntime optimizes an If body
        # apart from the same nodes as a plain graph (the merged file's own logits equal attnviz's exactly)
        step = np.spacing(w).astype(np.float32) if w.dtype == np.float16 else 1e-6
        assert np.all(np.abs(g - w.astype(np.float32)) <= step)
    # close to full precision: 4-bit weights move the maps by a few 1e-3 here, float16 by a few 1e-4
    tol = 0.05 if variant.startswith("q4") else 2e-3
    for a, b in zip(r.maps, full.maps):
        assert a.shape == b.shape
        assert 0 < np.abs(a.array() - b.array()).max() < tol
        np.testing.assert_allclose(a.array().sum(-1), 1.0, atol=tol)


@pytest.mark.parametrize("variant", ["q4", "fp16"])
def test_quantized_generation_through_the_cache_matches_a_full_rerun(repo, image, variant):
    """The cached steps run the with-past branch: each step's rows equal the same variant's full re-run."""
    m = open_model(repo, provider="cpu", variant=variant)
    cached = m.analyze(text=PROMPT, image=str(image), generate=3, use_cache=True)
    rerun = m.analyze(text=PROMPT, image=str(image), generate=3, use_cache=False)
    assert cached.info["generated_ids"] == rerun.info["generated_ids"]
    tol = 1e-5 if variant == "q4" else 2e-3  # float16 keys come back from the cache as float32, exactly
    for a, b in zip(cached.maps, rerun.maps):
        assert a.shape == b.shape and np.abs(a.array() - b.array()).max() < tol


def test_the_cli_takes_q4_and_fp16(repo, image, tmp_path, capsys):
    assert main(["inspect", str(repo), "--no-probe", "--json", "--variant", "q4"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["variant"] == "q4" and d["files"][-1] == "decoder_model_merged_q4.onnx"
    for v in ("q4", "fp16"):
        out = tmp_path / f"{v}.npz"
        assert (
            main(["extract", str(repo), "--variant", v, "--text", PROMPT, "--image", str(image), "--out", str(out)])
            == 0
        )
        with np.load(out) as z:
            arrays = [z[k] for k in z.files if z[k].dtype.kind == "f" and z[k].ndim >= 4]
        assert arrays and all(a.dtype == np.float32 and np.isfinite(a).all() for a in arrays)


def test_figure_takes_the_variant_and_its_recipe_keeps_it(repo, image, tmp_path):
    """``figure --variant q4`` draws the q4 files' maps, records the variant, and the recipe redraws the same."""
    from PIL import Image

    def pixels(p):
        return np.asarray(Image.open(p).convert("RGB"), dtype=np.int16)

    args = ["--text", PROMPT, "--image", str(image), "--view", "heatmap", "--dpi", "60"]
    assert main(["figure", str(repo), *args, "--variant", "q4", "--out", str(tmp_path / "q4.png")]) == 0
    assert main(["figure", str(repo), *args, "--out", str(tmp_path / "full.png")]) == 0
    recipe = json.loads((tmp_path / "q4.png.recipe.json").read_text())
    assert recipe["options"]["variant"] == "q4"
    assert "variant" not in json.loads((tmp_path / "full.png.recipe.json").read_text())["options"]
    assert main(["figure", "--recipe", str(tmp_path / "q4.png.recipe.json"), "--out", str(tmp_path / "again.png")]) == 0
    q4, full, again = (pixels(tmp_path / f"{n}.png") for n in ("q4", "full", "again"))
    assert np.array_equal(q4, again)  # the recipe opened the q4 files again
    assert q4.shape == full.shape and np.abs(q4 - full).max() > 0  # and they are not the full-precision maps
