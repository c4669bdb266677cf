"""Issue 8: a decoder file of an optimum export opened alone, given a text or an image, runs and generates.

``decoder_model*.onnx`` takes ``encoder_hidden_states``: the export's ``encoder_model.onnx`` beside it makes them
(run once), as the folder does.  References: transformers' eager attentions and greedy ``generate`` on the same
saved weights (tokenised / preprocessed by transformers itself); cached generation's maps equal a full re-run's.
Without an encoder beside the file, and for a with-past file whose cache holds the encoder's keys, one line says
what to do.
"""

import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import attnviz.runtime.model as am  # noqa: E402
from attnviz.cli import main  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402

TOL = 5e-4
pytestmark = pytest.mark.slow
TEXT = "w5 w9 w13 w2 w40"
DECODER_LABELS = [x for i in range(2) for x in (("decoder", "self", i), ("decoder", "cross", i))]
LABELS = [("encoder", "self", 0), ("encoder", "self", 1)] + DECODER_LABELS


@pytest.fixture(scope="module")
def marian(optimum_export):
    root = optimum_export("marian")
    hf = transformers.MarianMTModel.from_pretrained(root / "hf", attn_implementation="eager").eval()
    tok = transformers.AutoTokenizer.from_pretrained(root / "hf")
    return root, hf, tok


def _hf_greedy(hf, steps, **kw):
    with torch.no_grad():
        out = hf.generate(
            **kw, max_new_tokens=steps, do_sample=False, num_beams=1, forced_eos_token_id=None, bad_words_ids=None
        )
    return [int(t) for t in out[0]]


def _refs(o):
    refs = list(o.encoder_attentions)
    for s, c in zip(o.decoder_attentions, o.cross_attentions):
        refs += [s, c]
    return [r.numpy() for r in refs]


@pytest.mark.parametrize("name", ["decoder_model.onnx", "decoder_model_merged.onnx"])
def test_marian_decoder_file_alone_with_a_text(marian, name, monkeypatch):
    """The text is the source sentence (as for the folder); --text-pair the forced target.  The encoder file
    beside it runs once, the decoder file once; every map equals transformers'."""
    root, hf, tok = marian
    runs = []
    real = am._run_bound
    monkeypatch.setattr(am, "_run_bound", lambda s, f, feeds: runs.append(1) or real(s, f, feeds))
    m = open_model(root / "onnx" / name, provider="cpu")
    r = m.analyze(text=TEXT, text_pair="w7 w8")
    assert len(runs) == 2  # encoder_model.onnx, then this file: no dummy run
    ids = tok(TEXT, add_special_tokens=False, return_tensors="pt")["input_ids"]
    dec = torch.tensor([[0] + tok("w7 w8", add_special_tokens=False)["input_ids"]])  # decoder start, then the pair
    with torch.no_grad():
        o = hf(input_ids=ids, decoder_input_ids=dec, output_attentions=True)
    assert [(s.stack, s.kind, s.layer) for s in r.sites] == LABELS
    for got, want, s in zip(r.maps, _refs(o), r.sites):
        np.testing.assert_allclose(got.array(), want, atol=TOL, err_msg=str(s))
    assert r.tokens.labels == TEXT.split() and r.key_tokens.labels == ["<pad>", "w7", "w8"]
    assert any("encoder_model.onnx beside it" in n for n in r.info["notes"])


@pytest.mark.parametrize("name", ["decoder_model.onnx", "decoder_model_merged.onnx"])
def test_marian_decoder_file_alone_generates_as_transformers(marian, name):
    root, hf, tok = marian
    m = open_model(root / "onnx" / name, provider="cpu")
    r = m.analyze(text=TEXT, generate=8)
    assert r.info["generation"] == ("kv-cache" if "merged" in name else "full re-run")  # the merged file's cache
    ids = tok(TEXT, add_special_tokens=False, return_tensors="pt")["input_ids"]
    want = _hf_greedy(hf, 8, input_ids=ids, attention_mask=torch.ones_like(ids))
    got = [0] + r.info["generated_ids"]
    assert len(got) > 3 and got == want[: len(got)]
    full = m.analyze(text=TEXT, generate=8, use_cache=False)
    assert full.info["generated_ids"] == r.info["generated_ids"]
    for a, b, s in zip(r.maps, full.maps, r.sites):
        assert a.shape == b.shape, s
        np.testing.assert_allclose(a.array(), b.array(), atol=1e-5, err_msg=str(s))


def test_vision_decoder_with_past_file_alone_generates_from_an_image(optimum_export, tmp_path):
    """vit-gpt2's with-past file caches only the decoder's own keys (cross keys come from encoder_hidden_states):
    with the image encoder beside it, an empty cache is a first step, and it generates through its cache."""
    from PIL import Image

    root = optimum_export("vit-gpt2")
    hf = transformers.VisionEncoderDecoderModel.from_pretrained(root / "hf", attn_implementation="eager").eval()
    proc = transformers.ViTImageProcessor.from_pretrained(root / "hf")
    img = tmp_path / "scene.png"
    # seed 3: a caption that changes (many random images make this tiny decoder repeat one token)
    Image.fromarray((np.random.default_rng(3).random((48, 64, 3)) * 255).astype(np.uint8)).save(img)
    m = open_model(root / "onnx" / "decoder_with_past_model.onnx", provider="cpu")
    r = m.analyze(image=str(img), generate=8)
    assert r.info["generation"] == "kv-cache" and [(s.stack, s.kind, s.layer) for s in r.sites] == LABELS
    px = proc(Image.open(img).convert("RGB"), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        want = [int(t) for t in hf.generate(pixel_values=px, max_new_tokens=8, do_sample=False, num_beams=1)[0]]
    got = [0] + r.info["generated_ids"]
    assert len(set(got)) > 2 and got == want[: len(got)]
    full = m.analyze(image=str(img), generate=8, use_cache=False)
    assert full.info["generated_ids"] == r.info["generated_ids"]
    for a, b, s in zip(r.maps, full.maps, r.sites):
        np.testing.assert_allclose(a.array(), b.array(), atol=1e-5, err_msg=str(s))


def test_what_a_decoder_file_alone_cannot_do_is_one_line(marian, tmp_path, capsys):
    root, _, _ = marian
    alone = tmp_path / "decoder_model.onnx"  # no encoder beside it
    shutil.copy(root / "onnx" / "decoder_model.onnx", alone)
    shutil.copy(root / "onnx" / "tokenizer.json", tmp_path / "tokenizer.json")
    out = tmp_path / "maps.npz"
    assert main(["extract", str(alone), "--text", TEXT, "--generate", "3", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no encoder_model.onnx beside it" in err[0] and "--inputs" in err[0]
    # Marian's with-past file keeps the encoder's keys in its cache: an empty one would leave cross-attention
    # without keys, so it is refused rather than run
    past = root / "onnx" / "decoder_with_past_model.onnx"
    assert main(["extract", str(past), "--text", TEXT, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "open the export folder" in err[0] and "past_key_values.0.encoder.key" in err[0]
    # raw feeds hold the decoder's side only: generation needs the encoder's input
    npz = tmp_path / "feeds.npz"
    np.savez(
        npz,
        input_ids=np.array([[0]]),
        encoder_hidden_states=np.zeros((1, 3, 32), np.float32),
        encoder_attention_mask=np.ones((1, 3), np.int64),
    )
    dec = root / "onnx" / "decoder_model.onnx"
    assert main(["extract", str(dec), "--inputs", str(npz), "--generate", "3", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the decoder of an export: to generate, give the encoder's input" in err[0]
    assert not out.exists()
    assert main(["extract", str(dec), "--inputs", str(npz), "--out", str(out)]) == 0  # one decoder run: fine


def _merged_decoder_only(src, dst):
    """optimum's older decoder-only layout: the whole model.onnx as both branches of an If on ``use_cache_branch``
    (shape [1]), every output (logits, present.*) out of the If."""
    import onnx
    from onnx import TensorProto, helper
    from test_subgraphs import _rename

    m = onnx.load(str(src))
    g = m.graph
    outs = [o.name for o in g.output]
    branches = [
        helper.make_graph(
            list(_rename(g, p, keep=set()).node),
            f"branch{i}",
            [],
            [helper.make_tensor_value_info(p + o, TensorProto.FLOAT, None) for o in outs],
        )
        for i, p in enumerate(("then/", "else/"))
    ]
    node = helper.make_node("If", ["use_cache_branch"], outs, then_branch=branches[0], else_branch=branches[1])
    inputs = list(g.input) + [helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1])]
    graph = helper.make_graph([node], "merged", inputs, list(g.output), initializer=list(g.initializer))
    out = helper.make_model(graph, opset_imports=m.opset_import)
    out.ir_version = m.ir_version
    onnx.save(out, str(dst))
    return dst


def test_decoder_only_merged_file_alone_generates_with_its_cache(optimum_export, tmp_path):
    """A decoder-only decoder_model_merged.onnx opened alone: the first step runs with the cache branch off and
    an empty cache, every later step feeds the cache; tokens = transformers' greedy, maps = a full re-run's."""
    root = optimum_export("gpt2")
    hf = transformers.GPT2LMHeadModel.from_pretrained(root / "hf", attn_implementation="eager").eval()
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(root / "onnx" / name, tmp_path / name)
    m = open_model(_merged_decoder_only(root / "onnx" / "model.onnx", tmp_path / "decoder_model_merged.onnx"))
    assert m.kind == "decoder" and len(m.sites) == 2  # both branches hold the same two layers
    prompt = np.array([[5, 17, 42, 8]])
    r = m.analyze(feeds={"input_ids": prompt, "attention_mask": np.ones_like(prompt)}, generate=10)
    assert r.info["generation"] == "kv-cache"
    want = _hf_greedy(hf, 10, input_ids=torch.tensor(prompt), attention_mask=torch.ones(1, 4, dtype=torch.long))
    got = [int(t) for t in prompt[0]] + r.info["generated_ids"]
    assert len(got) > 8 and got == want[: len(got)]
    full = m.analyze(feeds={"input_ids": prompt, "attention_mask": np.ones_like(prompt)}, generate=10, use_cache=False)
    assert full.info["generated_ids"] == r.info["generated_ids"]
    for a, b in zip(r.maps, full.maps):
        assert a.shape == b.shape == (1, 4, len(got) - 1, len(got) - 1)
        np.testing.assert_allclose(a.array(), b.array(), atol=1e-5)
    t = m.analyze(text="w5 w17 w42", generate=4)  # a text prompt through the folder's tokenizer, the same way
    assert t.info["generation"] == "kv-cache" and t.tokens.labels[:3] == ["w5", "w17", "w42"]
