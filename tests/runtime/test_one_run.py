"""Issue 8, Build 8: no dummy probe run when real inputs are given.

``extract`` with ``--text``, ``--image`` or ``--inputs`` on a single file runs the model exactly once (every
session run of an instrumented model is counted), and the labels are the ones transformers gives and the ones a
dummy probe run gives (what attnviz did before).  A graph whose encoder/decoder role is only a static guess is
labelled from that one real run.
"""

import json
import shutil

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx_builders import VOCAB, tiny_text_model

from attnviz.cli import main
from attnviz.runtime import open_model

pytest.importorskip("torch")
pytest.importorskip("transformers")


def _image(path):
    from PIL import Image

    Image.fromarray((np.random.default_rng(0).random((40, 48, 3)) * 255).astype(np.uint8)).save(path)
    return path


def _word_tokenizer(path, bert_style: bool):
    import hf_models

    hf_models.word_tokenizer(99, bert_style=bert_style).backend_tokenizer.save(str(path))


# (arch, exporter, attention, opset) as tests/runtime/test_parity.py exports them (one session-wide export each)
FAMILIES = {
    "bert": ("bert", "legacy", "eager", 23),  # BERT-like encoder
    "gpt2": ("gpt2", "legacy", "eager", 17),  # decoder-only
    "t5": ("t5", "legacy", "eager", 17),  # encoder-decoder in one file
    "vit": ("vit", "legacy", "eager", 17),
    "vision-decoder": ("vision-decoder", "legacy", "eager", 17),  # ViT -> GPT-2 in one file
}


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILIES))
def test_one_run_per_extract_on_single_files(family, hf_export, runs, tmp_path, capsys):
    path, feeds, _, labels = hf_export(*FAMILIES[family])
    model = tmp_path / "model.onnx"  # beside a tokenizer, so --text works
    shutil.copy(path, model)
    _word_tokenizer(tmp_path / "tokenizer.json", bert_style=family == "bert")
    probed = open_model(model, provider="cpu")
    probed.probe()  # what every --text / --image extract did first until now
    want = [(s.stack, s.kind, s.layer, s.heads) for s in probed.sites]
    assert [w[:3] for w in want] == labels  # == transformers' own attentions, in canonical order
    npz = tmp_path / "feeds.npz"
    np.savez(npz, **feeds)
    given = {"inputs": ["--inputs", str(npz)]}
    if family in ("vit", "vision-decoder"):
        given["image"] = ["--image", str(_image(tmp_path / "x.png"))]
    else:
        given["text"] = ["--text", "the cat sat on the mat"]
    for how, args in given.items():
        runs.clear()
        out = tmp_path / f"{how}.npz"
        assert main(["extract", str(model), *args, "--out", str(out)]) == 0, capsys.readouterr().err
        assert len(runs) == 1, (how, runs)
        sites = json.loads(str(np.load(out)["sites"]))
        assert [(s["stack"], s["kind"], s["layer"], s["heads"]) for s in sites] == want, how
        if how == "inputs":  # the given feeds, as given
            assert runs[0] == {k: v.shape for k, v in feeds.items()}


def _hidden_causal(path):
    """A causal decoder whose mask the static guess cannot see (j - i > 0 instead of j > i; no names saying
    decoder): only its maps tell what it is."""
    tiny_text_model(path, causal=True, classifier=False)
    m = onnx.load(str(path))
    for i, n in enumerate(m.graph.node):
        if n.op_type == "Greater":
            m.graph.node.remove(n)
            m.graph.node.insert(i, helper.make_node("Greater", ["diff", "zero"], ["upper"]))
            m.graph.node.insert(i, helper.make_node("Sub", ["ar", "ar_col"], ["diff"]))
            break
    for n in m.graph.node:
        n.name = n.name.replace("decoder", "block")
    onnx.save(m, str(path))
    return path


def _bert_style_tokenizer(path):
    """A word tokenizer over the tiny model's vocabulary that adds [CLS] ... [SEP] to a text (an encoder's way)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="[PAD]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 1), ("[SEP]", 2)]
    )
    tk.save(str(path))


def test_a_static_guess_is_settled_by_the_real_run(tmp_path, runs):
    """The graph looks like an encoder until it runs: the text's own run shows the causal map and labels it a
    decoder (one run: a decoder's prompt and an encoder's text give the same ids with this vocabulary)."""
    path = _hidden_causal(tmp_path / "lm.onnx")
    m = open_model(path, provider="cpu")
    assert m.kind == "encoder"  # the static guess this test is about
    r = m.analyze(text="the cat sat on")
    assert len(runs) == 1 and m.kind == "decoder"
    assert [(s.stack, s.kind, s.layer) for s in r.sites] == [("decoder", "self", 0), ("decoder", "self", 1)]
    assert r.tokens.labels == ["the", "cat", "sat", "on"]
    a = r.maps[0].array()[0, 0]
    assert np.allclose(np.triu(a, 1), 0) and np.allclose(a.sum(-1), 1)  # causal, and the rows are distributions


def test_a_wrong_guess_whose_inputs_differ_runs_again_as_what_it_is(tmp_path, runs):
    """With a tokenizer that adds [CLS]/[SEP] to an encoder's text, the first run (as an encoder) fed other ids
    than a decoder's prompt: the maps shown are those of a second run on the prompt, not of the wrong input."""
    path = _hidden_causal(tmp_path / "lm.onnx")
    _bert_style_tokenizer(tmp_path / "tokenizer.json")
    r = open_model(path, provider="cpu").analyze(text="the cat sat on the mat")
    assert [r["input_ids"] for r in runs] == [(1, 8), (1, 6)]  # [CLS] the cat sat on the mat [SEP], the prompt
    assert r.tokens.labels == "the cat sat on the mat".split() and r.maps[0].shape == (1, 2, 6, 6)


def test_generate_on_a_guessed_encoder_confirms_on_the_user_input(tmp_path, runs):
    """--generate on a graph guessed to be an encoder would be refused; its first real run (the user's text, not a
    dummy) shows a decoder, and generation goes on; the tokens equal a plain greedy loop over onnxruntime."""
    import onnxruntime as ort

    path = _hidden_causal(tmp_path / "lm.onnx")
    r = open_model(path, provider="cpu").analyze(text="the cat sat on", generate=3)
    assert runs[0] == {"input_ids": (1, 4)}  # the text itself, not a 6-token dummy
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ids = [VOCAB.index(w) for w in "the cat sat on".split()]
    want = []
    for _ in range(3):
        nxt = int(np.argmax(sess.run(None, {"input_ids": np.array([ids])})[0][0, -1]))
        want.append(nxt)
        ids.append(nxt)
    assert r.info["generated_ids"] == want[: len(r.info["generated_ids"])] and r.info["generated_ids"]
