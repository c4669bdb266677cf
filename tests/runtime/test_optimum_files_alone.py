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
    assert not out.exists()
